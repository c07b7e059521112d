"""Sharded `vlr caption` on a tiny random Qwen2-VL and test-made videos (one of them broken):
one process, two shards of a job array and two torchrun-style ranks (``RANK`` /
``WORLD_SIZE`` / ``LOCAL_RANK``) write the same captions file, settings record and failures
file byte for byte; a shard SIGKILLed mid-way and resumed does too; the other shard's work
is kept meanwhile. Every run is a subprocess with one thread (the condition docs/capst.md
states: the same threads per process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("torchvision")
pytest.importorskip("av")

from _refusal import assert_refused  # noqa: E402
from _tiny_mllm import save_model_folder, tiny_qwen2vl  # noqa: E402
from _videos import write_video  # noqa: E402

from vlr_plugins.mllm.caption_shards import parts_dir_of  # noqa: E402

SETTINGS = ("prompt: Describe the video in detail.\n"
            "video_input: {num_frames: 4, max_pixels: 3136}\n"
            "generation: {max_new_tokens: 12, min_new_tokens: 12, do_sample: false}\n")
NUM_VIDEOS = 7  # v03 is broken; sorting windows of 4 batches of 1: shard 0 takes v00..v03, shard 1 v04..v06
BATCH = "1"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("caption-shards")
    model, processor = tiny_qwen2vl(seed=5)
    folder = save_model_folder(root / "tiny-qwen2vl", model, processor)
    videos = root / "videos"
    videos.mkdir()
    for i in range(NUM_VIDEOS):
        if i == 3:
            (videos / "v03.mp4").write_bytes(b"not a video")
        else:
            write_video(videos / f"v{i:02d}", "ffv1", num_frames=8 + i)
    settings = root / "tiny.yaml"
    settings.write_text(SETTINGS)
    world = dict(root=root, model=folder, videos=videos, settings=settings)
    single = root / "single" / "caps.jsonl"
    (code, stdout, stderr), = finish(run(world, single))
    assert code == 1, (stdout, stderr)  # the broken video, as a single process reports it
    world["single"] = single
    return world


def argv(world, out, *extra):
    return ["caption", "--model", str(world["model"]), "--videos", str(world["videos"]), "--settings",
            str(world["settings"]), "--out", str(out), "--batch-size", BATCH, "--no-progress", *extra]


def run(world, out, *extra, env=None):
    """``vlr caption`` in a subprocess of one thread (``env``: torchrun's variables)."""
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    full = {**base, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1", **(env or {})}
    return subprocess.Popen([sys.executable, "-c", "import sys; from vlr_plugins.cli import main; "
                             "sys.exit(main(sys.argv[1:]))", *argv(world, out, *extra)], env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(*children):
    outputs = [c.communicate(timeout=600) for c in children]
    return [(c.returncode, *o) for c, o in zip(children, outputs)]


def assert_same_files(world, out):
    single = world["single"]
    for suffix in ("", ".settings.json", ".failures.jsonl"):
        assert Path(f"{out}{suffix}").read_bytes() == Path(f"{single}{suffix}").read_bytes(), suffix
    assert not parts_dir_of(out).exists()
    assert sorted(p.name for p in out.parent.iterdir()) == sorted(p.name for p in single.parent.iterdir())


def test_the_single_process_reference_is_what_it_should_be(world):
    lines = [json.loads(x) for x in world["single"].read_text().splitlines()]
    assert [r["id"] for r in lines] == ["v00", "v01", "v02", "v04", "v05", "v06"]
    assert all(r["caption"] for r in lines)
    assert [json.loads(x)["id"] for x in Path(f"{world['single']}.failures.jsonl").read_text().splitlines()] == ["v03"]


def test_two_shards_and_two_torchrun_ranks_write_what_one_process_writes(world, tmp_path):
    shards = tmp_path / "shards" / "caps.jsonl"
    results = finish(run(world, shards, "--shard-index", "0", "--shard-count", "2"),
                     run(world, shards, "--shard-index", "1", "--shard-count", "2"))
    stdout = "".join(r[1] for r in results)
    assert stdout.count("wrote 6 captions") == 1, results  # exactly one of them merged
    assert results[0][0] == 1 and "shard 0 of 2 (videos 0..3 of 7: 'v00' .. 'v03')" in results[0][2]  # the broken one
    assert results[1][0] in (0, 1), results  # 1 when it merged: the merged file lists a failure
    assert_same_files(world, shards)

    ranks = tmp_path / "ranks" / "caps.jsonl"
    results = finish(*(run(world, ranks, env={"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": str(r)})
                       for r in range(2)))
    assert "".join(r[1] for r in results).count("wrote 6 captions") == 1, results
    assert_same_files(world, ranks)


def test_a_shard_killed_with_sigkill_resumes_and_the_other_shards_work_is_kept(world, tmp_path):
    out = tmp_path / "caps.jsonl"
    part1 = parts_dir_of(out) / "part-00001-of-00002.jsonl"
    child = run(world, out, "--shard-index", "1", "--shard-count", "2")
    other = run(world, out, "--shard-index", "0", "--shard-count", "2")  # meanwhile, on the other core
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and child.poll() is None:
        if part1.exists() and part1.read_bytes().count(b"\n") >= 2:  # its first batch
            break
        time.sleep(0.01)
    assert child.poll() is None, f"the shard ended before it was killed: {child.communicate()}"
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    assert 2 <= part1.read_bytes().count(b"\n") < 3
    with open(part1, "ab") as f:  # as if the kill came mid-write: a partial last line
        f.write(b'{"id": "v06", "capt')

    # shard 0 finishes meanwhile: its part stays, it waits for shard 1
    (code, stdout, stderr), = finish(other)
    assert code == 1 and "waiting for shard 1" in stdout, (stdout, stderr)
    assert not out.exists()
    kept = (parts_dir_of(out) / "part-00000-of-00002.jsonl").read_bytes()
    # the killed shard resumed with other settings is refused, naming the shard; nothing changes
    assert_refused(argv(world, out, "--shard-index", "1", "--shard-count", "2", "--resume", "--prompt", "Other."),
                   "--prompt", "shard 1", "'Other.'", str(parts_dir_of(out)), leaves=[out])
    assert (parts_dir_of(out) / "part-00000-of-00002.jsonl").read_bytes() == kept
    (code, stdout, stderr), = finish(run(world, out, "--shard-index", "1", "--shard-count", "2", "--resume"))
    assert code == 1 and "cut off a partial last line" in stdout and "wrote 6 captions" in stdout, (stdout, stderr)
    assert "captioned 1, already there 2" in stdout
    assert_same_files(world, out)
