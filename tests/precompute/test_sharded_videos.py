"""``vlr precompute --videos`` sharded: one process and two job-array shards of a tiny timm
video tower (from a tower config) write the same store and the same failures file."""

from __future__ import annotations

import torch
import pytest
from _refusal import run_vlr

pytest.importorskip("av")
pytest.importorskip("timm")

from _videos import write_video  # noqa: E402

TOWER_YAML = ("type: FramePooledVideoEncoder\n"
              "tower: {kind: timm, model_name: vit_tiny_patch16_224, img_size: 32, depth: 1, embed_dim: 32, "
              "num_heads: 2}\n")


def _files(store):
    return {p.name: p.read_bytes() for p in sorted(store.iterdir())}


def test_two_video_shards_write_the_single_process_store_and_failures(tmp_path):
    for i, name in enumerate(["a", "b", "c", "d", "sub/e"]):
        (tmp_path / "videos" / name).parent.mkdir(parents=True, exist_ok=True)
        write_video(tmp_path / "videos" / name, "h264", 10 + 3 * i)
    (tmp_path / "videos" / "aa.mp4").write_bytes(b"\x00" * 100)  # sorted 2nd: in shard 0 (a, aa)
    (tmp_path / "tower.yaml").write_text(TOWER_YAML)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        argv = ["precompute", "--videos", "videos", "--encoder", "tower.yaml", "--frames", "4", "--workers", "0",
                "--batch-size", "2"]
        code, _, err = run_vlr(argv + ["--out", "one"], cwd=tmp_path)
        assert code == 1 and "1 of 6 videos could not be decoded" in err, err
        code, out, err = run_vlr(argv + ["--out", "two", "--shard-index", "0", "--shard-count", "2"], cwd=tmp_path)
        assert code == 1 and "waiting for shard 1" in out and "1 videos could not be decoded" in err, out + err
        code, out, err = run_vlr(argv + ["--out", "two", "--shard-index", "1", "--shard-count", "2"], cwd=tmp_path)
        assert code == 1 and "merged from 2 shards" in out and err.splitlines()[-1].startswith("error: 1 items"), err
    finally:
        torch.set_num_threads(before)
    assert _files(tmp_path / "two") == _files(tmp_path / "one")
    assert (tmp_path / "two.failures.jsonl").read_bytes() == (tmp_path / "one.failures.jsonl").read_bytes()
    assert not (tmp_path / ".two.shards").exists()
