"""`vlr caption --device cuda` on a tiny random Qwen2-VL: batches of mixed-length videos caption each
video as a batch of one does on the GPU, and as the CPU does.

Marked ``gpu``: skips without CUDA; ``benchmarks/gpu_check.sh`` requires it. Greedy decoding of
fp32 logits: left padding changes the GPU kernels' shapes, and so the logits' last bits; the
random model's top tokens are far enough apart here that the same text comes out.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.gpu

SETTINGS = ("prompt: Describe the video in detail.\n"
            "video_input: {num_frames: 4, max_pixels: 3136}\n"
            "generation: {max_new_tokens: 16, min_new_tokens: 16, do_sample: false}\n")
SIZES = [(48, 64), (28, 28), (56, 56), (28, 56), (64, 48)]
NUM_VIDEOS = len(SIZES)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from _tiny_mllm import save_model_folder, tiny_qwen2vl
    from _videos import write_video

    root = tmp_path_factory.mktemp("caption-gpu")
    model, processor = tiny_qwen2vl(seed=5)
    folder = save_model_folder(root / "tiny-qwen2vl", model, processor)
    videos = root / "videos"
    videos.mkdir()
    for i, (height, width) in enumerate(SIZES):  # prompts of several lengths in one batch
        write_video(videos / f"v{i:02d}", "ffv1", num_frames=6 + 3 * i, height=height, width=width)
    settings = root / "tiny.yaml"
    settings.write_text(SETTINGS)
    return dict(model=folder, videos=videos, settings=settings, root=root)


def _caption(world, out, *extra) -> dict[str, str]:
    from _refusal import run_vlr

    code, stdout, stderr = run_vlr(["caption", "--model", world["model"], "--videos", world["videos"], "--settings",
                                    world["settings"], "--out", out, "--no-progress", *extra])
    assert code == 0, stdout + stderr
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    return {r["id"]: r["caption"] for r in rows}


def test_batches_on_the_gpu_caption_each_video_as_alone(world, tmp_path):
    alone = _caption(world, tmp_path / "alone.jsonl", "--device", "cuda", "--batch-size", "1")
    batched = _caption(world, tmp_path / "batched.jsonl", "--device", "cuda", "--batch-size", "3")
    assert len(alone) == NUM_VIDEOS and len(set(alone.values())) > 1  # captions differ: a mix-up would show
    assert batched == alone


def test_the_gpu_captions_as_the_cpu_does(world, tmp_path):
    gpu = _caption(world, tmp_path / "gpu.jsonl", "--device", "cuda", "--batch-size", "3")
    cpu = _caption(world, tmp_path / "cpu.jsonl", "--device", "cpu", "--batch-size", "3")
    assert gpu == cpu
