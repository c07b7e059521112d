"""vLLM as a bulk backend for MLLM embeddings and captions, on GPUs.

vLLM is not a dependency of vlr-plugins and needs a CUDA GPU: :func:`require_vllm` refuses
with a message that says which is missing (and how to get it) before anything is loaded.
"""

from __future__ import annotations

from vlr_plugins.errors import ConfigError

__all__ = ["require_vllm"]


def require_vllm(option: str = "backend='vllm'") -> None:
    """Refuse (a :class:`~vlr_plugins.errors.ConfigError` naming ``option``) unless vLLM is
    importable and a CUDA GPU is visible."""
    import importlib.util

    import torch

    if importlib.util.find_spec("vllm") is None:
        raise ConfigError(f"{option}: vLLM is not installed (pip install vllm, on a machine with a CUDA GPU); "
                          f"the transformers backend needs neither")
    if not torch.cuda.is_available():
        raise ConfigError(f"{option}: vLLM runs on CUDA GPUs and none is visible here; use the transformers "
                          f"backend")
