"""``--engine ray`` of the sharded commands (vlr_plugins/_ray.py): on a local Ray of two CPUs,
``vlr precompute`` and ``vlr mine`` run their shards as Ray actors, and the parts merge into
the bytes one process writes. One Ray session serves the module (its start-up is slow)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

from _refusal import run_vlr

SUPPORT = Path(__file__).resolve().parent / "_support"
SRC = Path(__file__).resolve().parents[1] / "src"

ENCODER = """
import torch

class MeanColor:
    dim = 3

    def __call__(self, images):
        return torch.stack([torch.tensor(im.getpixel((0, 0)), dtype=torch.float32) / 255 for im in images])
"""


@pytest.fixture(scope="module")
def local_ray():
    with pytest.MonkeyPatch.context() as mp:
        # the workers this ray.init starts inherit the environment: this checkout, the test models
        mp.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(SRC), str(SUPPORT), os.environ.get("PYTHONPATH"))
                                                if p))
        mp.setenv("PYTHONDONTWRITEBYTECODE", "1")
        for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
            mp.delenv(name, raising=False)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        yield
        ray.shutdown()


def test_precompute_engine_ray_writes_the_single_process_store(tmp_path, local_ray, monkeypatch):
    from PIL import Image

    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    (tmp_path / "enc.py").write_text(ENCODER)  # a module:callable of the current folder, as the workers see it
    for i in range(5):
        Image.new("RGB", (8, 8), (50 * i, 20, 200)).save(tmp_path / f"im{i}.png")
    images = tmp_path / "images.txt"
    images.write_text("".join(f"im{i}.png\n" for i in range(5)))

    def precompute(out, *more):
        return run_vlr(["precompute", "--images", "images.txt", "--encoder", "enc:MeanColor", "--out", out,
                        "--batch-size", "2", *more], cwd=tmp_path)

    code, _, err = precompute("one")
    assert code == 0, err
    code, printed, err = precompute("ray", "--engine", "ray", "--shard-count", "3", "--ray-workers", "2")
    assert code == 0, printed + err
    assert "merged from 3 shards" in printed and "waiting for shard" in printed
    assert err.count("done on Ray") == 3 and "2 workers" in err
    one, spread = tmp_path / "one", tmp_path / "ray"
    assert sorted(p.name for p in spread.iterdir()) == sorted(p.name for p in one.iterdir())
    for p in one.iterdir():
        assert (spread / p.name).read_bytes() == p.read_bytes(), p.name
    assert not (tmp_path / ".ray.shards").exists()


def test_mine_engine_ray_writes_the_single_process_corpus(tmp_path, local_ray):
    from vlr_plugins.mine.shards import run_record_of, work_dir_of

    rows = [{"id": f"img{i}", "caption": f"a {c} {a} on the grass", "positives": [f"the {a} is {c}"]}
            for i, (c, a) in enumerate([("red", "dog"), ("blue", "cat"), ("green", "cow"), ("red", "cat"),
                                        ("black", "dog"), ("white", "bird"), ("blue", "dog")])]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def mine(out, *more):
        return run_vlr(["mine", "paragraph", "train.jsonl", "--model", "_bow_model:BagOfWords", "--out", out,
                        "-k", "2", *more], cwd=tmp_path)

    code, _, err = mine("one.jsonl")
    assert code == 0, err
    code, printed, err = mine("ray.jsonl", "--engine", "ray")  # one shard per worker: 2
    assert code == 0, printed + err
    assert "shard 0 of 2" in printed and "shard 1 of 2" in printed and err.count("done on Ray") == 2
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    assert not work_dir_of(tmp_path / "ray.jsonl").exists()
    assert json.loads(run_record_of(tmp_path / "ray.jsonl").read_text())["manifest"]["settings"]["shard_count"] == 2
    # a refusal in a shard is the driver's one error line: the same run again with another setting
    code, printed, err = mine("ray.jsonl", "--engine", "ray", "-k", "3")
    assert code == 2 and err.strip().splitlines()[-1].startswith("error: --out") and "--num-negatives" in err, err
    # the gallery embedded once, its shards as Ray tasks, then mined against by Ray's mining shards
    code, printed, err = run_vlr(["mine", "paragraph", "train.jsonl", "--model", "_bow_model:BagOfWords",
                                  "--gallery-store", "gallery", "--embed-gallery", "--batch-size", "2", "--engine",
                                  "ray"], cwd=tmp_path)
    assert code == 0 and "merged from 2 shards" in printed, printed + err
    code, printed, err = mine("ray-store.jsonl", "--gallery-store", "gallery", "--engine", "ray")
    assert code == 0, printed + err
    assert (tmp_path / "ray-store.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()


def test_caption_engine_ray_writes_the_single_process_captions(tmp_path, local_ray, monkeypatch):
    pytest.importorskip("transformers")
    pytest.importorskip("torchvision")
    pytest.importorskip("av")
    import torch
    from _tiny_mllm import save_model_folder, tiny_qwen2vl
    from _videos import write_video

    model, processor = tiny_qwen2vl(seed=5)
    folder = save_model_folder(tmp_path / "tiny-qwen2vl", model, processor)
    (tmp_path / "videos").mkdir()
    for i in range(3):
        write_video(tmp_path / "videos" / f"v{i}", "ffv1", num_frames=8 + i)
    (tmp_path / "tiny.yaml").write_text("prompt: Describe the video in detail.\n"
                                        "video_input: {num_frames: 4, max_pixels: 3136}\n"
                                        "generation: {max_new_tokens: 6, min_new_tokens: 6, do_sample: false}\n")

    def caption(out, *more):
        return run_vlr(["caption", "--model", folder, "--videos", "videos", "--settings", "tiny.yaml", "--out", out,
                        "--no-progress", *more], cwd=tmp_path)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as each Ray task computes (OMP_NUM_THREADS=1)
    try:
        code, _, err = caption("one.jsonl")
    finally:
        torch.set_num_threads(threads)
    assert code == 0, err
    code, printed, err = caption("ray.jsonl", "--engine", "ray", "--shard-count", "2")
    assert code == 0, printed + err
    assert "wrote 3 captions" in printed and err.count("done on Ray") == 2
    for suffix in ("", ".settings.json"):
        assert (tmp_path / f"ray.jsonl{suffix}").read_bytes() == (tmp_path / f"one.jsonl{suffix}").read_bytes()
    assert not (tmp_path / ".ray.jsonl.shards").exists()
