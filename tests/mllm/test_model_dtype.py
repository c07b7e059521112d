"""The dtype an MLLM is loaded in (``--model-dtype``): a tiny random Qwen2-VL saved in bfloat16
loads as bfloat16 under ``auto`` (the checkpoint's own, transformers 5's default) and as float32
when asked; the float32 load embeds exactly as the bfloat16 weights upcast by hand, and within
bfloat16's rounding of the ``auto`` load. float16 loads and runs on a CPU too (torch 2.14 has
the kernels), so it is not refused there."""

from __future__ import annotations

import argparse

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("torchvision")  # Qwen2-VL's video processor

from _tiny_mllm import clip, save_tiny_qwen2vl  # noqa: E402

from vlr_plugins.errors import ConfigError  # noqa: E402
from vlr_plugins.mllm import EOLEmbedder  # noqa: E402
from vlr_plugins.specs import load_mllm_spec  # noqa: E402
from vlr_plugins.mllm.model_dtype import (  # noqa: E402
    MODEL_DTYPES,
    add_model_dtype_option,
    dtype_name,
    resolve_model_dtype,
    slow_on_cpu,
)

TEXTS = ["A man slices a watermelon.", "two dogs", "Someone opens the door slowly, then leaves."]
# bfloat16 keeps 8 significant bits: unit-norm embeddings of a 2-layer model stay well within 2^-6
BF16_ATOL = 2.0 ** -6


@pytest.fixture(scope="module")
def bf16_folder(tmp_path_factory):
    return save_tiny_qwen2vl(tmp_path_factory.mktemp("dtype") / "tiny-bf16", seed=4, dtype=torch.bfloat16)


def floating_dtypes(module: torch.nn.Module) -> set[torch.dtype]:
    return {p.dtype for p in module.parameters() if p.is_floating_point()}


def test_auto_keeps_the_checkpoints_bfloat16_and_float32_upcasts_it(bf16_folder):
    clips = [clip(4, seed=1), clip(4, seed=2)]
    auto = load_mllm_spec(f"mllm:{bf16_folder}:care", dtype="auto")
    f32 = load_mllm_spec(f"mllm:{bf16_folder}:care", dtype="float32")
    assert floating_dtypes(auto.model) == {torch.bfloat16} and dtype_name(auto.model) == "bfloat16"
    assert floating_dtypes(f32.model) == {torch.float32} and dtype_name(f32.model) == "float32"
    assert floating_dtypes(load_mllm_spec(f"mllm:{bf16_folder}").model) == {torch.bfloat16}  # no dtype: auto

    text, video = f32.encode_text(TEXTS), f32.encode_video(clips)
    auto_text, auto_video = auto.encode_text(TEXTS), auto.encode_video(clips)
    assert text.dtype == auto_text.dtype == torch.float32  # embeddings come out in float32 either way
    torch.testing.assert_close(text, auto_text, atol=BF16_ATOL, rtol=0)
    torch.testing.assert_close(video, auto_video, atol=BF16_ATOL, rtol=0)

    # the reference: the bfloat16 weights upcast by hand, under the same prompt
    upcast = EOLEmbedder(model=auto.model.float(), processor=auto.processor, prompt="care")
    torch.testing.assert_close(text, upcast.encode_text(TEXTS), atol=1e-6, rtol=0)
    torch.testing.assert_close(video, upcast.encode_video(clips), atol=1e-6, rtol=0)


def test_float16_loads_and_runs_on_a_cpu(bf16_folder):
    f16 = load_mllm_spec(f"mllm:{bf16_folder}", dtype="float16")
    f32 = load_mllm_spec(f"mllm:{bf16_folder}", dtype=torch.float32)
    assert floating_dtypes(f16.model) == {torch.float16}
    out = f16.encode_text(TEXTS)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert (out * f32.encode_text(TEXTS)).sum(-1).min() > 0.999  # cosine to the float32 embedding


def test_dtype_names_resolve_and_bad_ones_are_refused():
    assert resolve_model_dtype("auto") is None and resolve_model_dtype(None) is None
    assert [resolve_model_dtype(n) for n in MODEL_DTYPES[1:]] == [torch.float32, torch.bfloat16, torch.float16]
    assert resolve_model_dtype(torch.float16) is torch.float16
    for bad in ("fp16", "int8", "half-ish"):
        with pytest.raises(ValueError, match="auto, float32, bfloat16, float16"):
            resolve_model_dtype(bad)
    with pytest.raises(ConfigError, match="dtype: .*'fp16'"):
        EOLEmbedder("unused-folder", dtype="fp16")


def test_a_half_dtype_on_a_cpu_is_warned_of_and_float32_is_not():
    layer = torch.nn.Linear(4, 4)
    assert slow_on_cpu(layer, "cpu") is None
    assert "--model-dtype float32" in slow_on_cpu(layer.to(torch.bfloat16), "cpu")
    assert slow_on_cpu(layer.to(torch.bfloat16), "cuda:0") is None  # not checked against the machine


def test_the_option_defaults_to_auto_and_takes_its_alias():
    parser = argparse.ArgumentParser(prog="vlr lens", exit_on_error=False)
    add_model_dtype_option(parser, "--dtype")
    assert parser.parse_args([]).model_dtype == "auto"
    assert parser.parse_args(["--model-dtype", "float32"]).model_dtype == "float32"
    assert parser.parse_args(["--dtype", "bfloat16"]).model_dtype == "bfloat16"
    with pytest.raises(argparse.ArgumentError, match="invalid choice: 'fp8'"):
        parser.parse_args(["--model-dtype", "fp8"])
