"""The vLLM backend: its sampling mapping everywhere; on a GPU with vllm installed, a tiny
random Qwen2 LM saved here answers a batch through ``LLM.chat``, with per-request seeds."""

from __future__ import annotations


import pytest

from vlr_plugins.chat.request import ChatRequest
from vlr_plugins.chat.vllm_chat import VLLMChatBackend, vllm_sampling
from vlr_plugins.errors import ConfigError


def test_sampling_keeps_what_vllm_takes():
    sampling = {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "max_tokens": 160, "seed": 7, "stop": None,
                "response_format": {"type": "json_object"}}
    assert vllm_sampling(sampling) == {"temperature": 0.7, "top_p": 0.9, "top_k": 20, "max_tokens": 160, "seed": 7}


def test_without_vllm_the_error_says_what_to_do():
    pytest.importorskip("openai")
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match="backend vllm needs the vllm package"):
            VLLMChatBackend("Qwen/Qwen2-VL-7B-Instruct")
    else:
        pytest.skip("vllm is installed here")


@pytest.mark.gpu
@pytest.mark.optional_package("vllm")  # not in benchmarks/gpu_wheels.txt: listed as not run there
def test_a_tiny_model_answers_a_batch(tmp_path):
    from _tiny_mllm import save_model_folder, tiny_qwen2_lm

    save_model_folder(tmp_path / "tiny", *tiny_qwen2_lm())
    backend = VLLMChatBackend(str(tmp_path / "tiny"), reasks=0, max_model_len=512, gpu_memory_utilization=0.2,
                              enforce_eager=True, dtype="float32")
    requests = [ChatRequest([{"role": "user", "content": f"Say {i}."}],
                            sampling={"temperature": 0.7, "top_p": 0.9, "max_tokens": 8, "seed": i}) for i in range(6)]
    first = backend.complete_many(requests)
    assert all(r.ok and isinstance(r.text, str) for r in first)
    # a request's answer does not depend on its batch: its own seed decides it
    alone = backend.complete_many(requests[2:3])
    assert alone[0].text == first[2].text
    assert backend.summary.completion_tokens > 0
