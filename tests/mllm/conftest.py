"""A tiny random Qwen2-VL with its processor, shared by the MLLM tests (built once)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_vl():
    pytest.importorskip("transformers")
    pytest.importorskip("torchvision")  # Qwen2-VL's video processor
    from _tiny_mllm import tiny_qwen2vl

    return tiny_qwen2vl()
