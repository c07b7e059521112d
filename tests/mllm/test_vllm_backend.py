"""The vLLM backend: refused with a clear message where vLLM or a GPU is missing; on a GPU with
vLLM, its embeddings equal the transformers backend's (cosine > 0.999) for texts and videos.

The gpu test needs vLLM, which the GPU check's wheel list (benchmarks/gpu_wheels.txt) does
not carry: it is marked ``optional_package("vllm")``, so there it skips and the GPU check's
summary lists it as "not run (optional)" rather than passed (docs/care.md)."""

from __future__ import annotations

import importlib.util

import pytest
import torch


from vlr_plugins.errors import ConfigError  # noqa: E402

HAVE_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.mark.skipif(HAVE_VLLM and torch.cuda.is_available(), reason="vLLM and a GPU are here")
def test_the_backend_is_refused_where_it_cannot_run(tmp_path):
    from vlr_plugins.mllm.vllm_backend import VLLMEmbedder, VLLMVideoCaptioner, require_vllm

    missing = "not installed" if not HAVE_VLLM else "none is visible"
    with pytest.raises(ConfigError, match=missing):
        require_vllm()
    with pytest.raises(ConfigError, match=f"VLLMEmbedder: .*{missing}"):
        VLLMEmbedder(tmp_path / "any-model")
    with pytest.raises(ConfigError, match=f"--backend vllm: .*{missing}"):
        VLLMVideoCaptioner(tmp_path / "any-model", "carebench")


@pytest.mark.gpu
@pytest.mark.optional_package("vllm")  # not in benchmarks/gpu_wheels.txt: listed as not run there
def test_vllm_and_transformers_embed_alike(tmp_path):
    pytest.importorskip("transformers")
    from _tiny_mllm import VLLM_SIZED, clip, save_tiny_qwen2vl

    from vlr_plugins.mllm import EOLEmbedder
    from vlr_plugins.mllm.vllm_backend import VLLMEmbedder

    folder = save_tiny_qwen2vl(tmp_path / "tiny", dtype=torch.bfloat16, **VLLM_SIZED)  # head size 64, for vLLM
    texts = ["A man slices a watermelon.", "two dogs", "Someone opens the door slowly, then leaves."]
    clips = [clip(4, 56, 56, seed=1), clip(4, 56, 56, seed=2)]
    video = dict(num_frames=4, min_pixels=28 * 28, max_pixels=56 * 56)
    hf = EOLEmbedder(folder, prompt="care", dtype="bfloat16", device="cuda", **video)
    expected_text, expected_video = hf.encode_text(texts).cpu(), hf.encode_video(clips).cpu()
    del hf
    torch.cuda.empty_cache()
    emb = VLLMEmbedder(folder, prompt="care", dtype="bfloat16", gpu_memory_utilization=0.3, enforce_eager=True,
                       max_model_len=2048, **video)
    text, video = emb.encode_text(texts), emb.encode_video(clips)
    assert text.shape == expected_text.shape and video.shape == expected_video.shape
    assert (text * expected_text).sum(-1).min() > 0.999
    assert (video * expected_video).sum(-1).min() > 0.999
