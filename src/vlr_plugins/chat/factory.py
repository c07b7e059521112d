"""A chat backend from its mapping (a pipeline's role): ``{backend: openai | transformers | vllm, model, ...}``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, Protocol

from vlr_plugins.chat.cache import ChatCache
from vlr_plugins.chat.request import ChatRequest, ChatResult, ChatSettings
from vlr_plugins.chat.summary import RunSummary
from vlr_plugins.errors import ConfigError

__all__ = ["BACKEND_TYPES", "ChatBackend", "build_backend", "check_role", "missing_key"]

_OPENAI = tuple(f.name for f in fields(ChatSettings) if f.name != "sampling") + ("video_transport",)
_KEYS: dict[str, tuple[str, ...]] = {
    "openai": _OPENAI,
    "transformers": ("model", "dtype", "device", "batch_size", "reasks", "attn_implementation",
                     "trust_remote_code"),
    "vllm": ("model", "reasks", "batch_size", "video_transport", "chat_template_kwargs", "tensor_parallel_size",
             "pipeline_parallel_size", "gpu_memory_utilization", "max_model_len", "dtype", "limit_mm_per_prompt",
             "max_num_seqs", "enforce_eager", "trust_remote_code", "mm_processor_kwargs",
             "allowed_local_media_path", "quantization", "kv_cache_dtype"),
}
#: the backends a role may name
BACKEND_TYPES = tuple(_KEYS)
_COUNTS = ("concurrency", "max_retries", "reasks", "batch_size", "tensor_parallel_size", "pipeline_parallel_size",
           "max_model_len", "max_num_seqs")


class ChatBackend(Protocol):
    """What the pipelines need of a backend: requests in, results in the same order."""

    summary: RunSummary
    batched: bool

    @property
    def concurrency(self) -> int: ...

    def complete_many(self, requests: list[ChatRequest], *, desc: str = ...) -> list[ChatResult]: ...

    def describe(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


def check_role(raw: Any, where: str) -> dict[str, Any]:
    """The role mapping checked without building anything (no model loaded, no key read):
    a known ``backend``, a ``model``, counts that are counts, no key that no backend takes;
    the keys of other backends are dropped (a file written for ``openai`` switched to
    ``vllm`` with ``--set`` keeps its ``base_url``, which vLLM in process does not use).
    Errors name ``where`` (``pipeline.yaml: roles.judge``) and the key."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping with backend and model, found {type(raw).__name__}")
    kind = raw.get("backend", "openai")
    if kind not in _KEYS:
        raise ConfigError(f"{where}.backend: expected one of {', '.join(BACKEND_TYPES)}, found {kind!r}")
    rest = {k: v for k, v in raw.items() if k != "backend"}
    unknown = sorted(set(rest) - {k for keys in _KEYS.values() for k in keys})
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} for backend {kind} "
                          f"(known: {', '.join(_KEYS[kind])})")
    # another backend's keys (base_url after `--set roles.judge.backend=vllm`) do not apply to this one
    rest = {k: v for k, v in rest.items() if k in _KEYS[kind]}
    if not isinstance(rest.get("model"), str) or not rest["model"].strip():
        raise ConfigError(f"{where}.model: expected a model name, found {rest.get('model')!r}")
    for key in _COUNTS:
        value = rest.get(key)
        low = 0 if key in ("max_retries", "reasks") else 1
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
            raise ConfigError(f"{where}.{key}: expected an integer >= {low}, found {value!r}")
    if kind == "openai":
        try:
            ChatSettings(**{k: v for k, v in rest.items() if k != "video_transport"})
        except ConfigError as e:
            raise ConfigError(f"{where}.{e}") from None
        except TypeError as e:
            raise ConfigError(f"{where}: {e}") from None
    return {"backend": kind, **rest}


def missing_key(raw: Mapping[str, Any]) -> str | None:
    """The environment variable an ``openai`` role reads its key from, when it is unset."""
    if raw.get("backend", "openai") != "openai":
        return None
    env = raw.get("api_key_env", "OPENAI_API_KEY")
    return None if os.environ.get(env) else env


def build_backend(raw: Mapping[str, Any], *, cache: ChatCache | None = None, where: str = "role") -> ChatBackend:
    """The backend a role names (checked first by :func:`check_role`); ``cache`` is shared
    by every backend of a run (answers are keyed by model, messages and sampling)."""
    spec = check_role(raw, where)
    kind = spec.pop("backend")
    if kind == "openai":
        from vlr_plugins.chat.openai_chat import OpenAIChatClient

        transport = spec.pop("video_transport", "frames")
        return OpenAIChatClient(ChatSettings(**spec), cache=cache, progress=False, video_transport=transport)
    if kind == "transformers":
        from vlr_plugins.chat.transformers_chat import TransformersChatBackend

        return TransformersChatBackend(spec.pop("model"), cache=cache, **spec)
    from vlr_plugins.chat.vllm_chat import VLLMChatBackend

    return VLLMChatBackend(spec.pop("model"), cache=cache, **spec)
