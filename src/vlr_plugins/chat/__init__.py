"""Asking language models: one chat client for every OpenAI-compatible endpoint, and local
transformers and vLLM backends that answer the same requests; shared by the synthetic
supervision pipelines (:mod:`vlr_plugins.generate`) and the LLM-judged metric CapST
(:mod:`vlr_plugins.eval.capst`).

- what is asked and answered: :class:`ChatSettings`, :class:`ChatRequest`,
  :class:`ChatResult`, :class:`EndpointError`; images and videos in a message as media
  parts (:func:`image_part`, :func:`video_part`);
- the backends, each taking requests and returning results in the order asked:
  :class:`OpenAIChatClient` (any OpenAI-compatible server), :class:`TransformersChatBackend`
  and :class:`VLLMChatBackend` (a model on this machine), :func:`build_backend` (one of them
  from a mapping ``{backend, model, ...}``);
- what they share: the answer cache (:class:`ChatCache`), retries (:class:`RetryPolicy`),
  JSON answers read and malformed ones asked again (:func:`parse_json_answer`,
  :func:`reask_messages`), the counters of a run (:class:`RunSummary`).

The backends are resolved on first use, so ``import vlr_plugins.chat`` needs no extra
package; building an OpenAI-compatible client needs ``openai`` (``pip install
'vlr-plugins[generate]'``), the local backends ``transformers`` or ``vllm``.
"""

from __future__ import annotations

from vlr_plugins._lazy import lazy_exports
from vlr_plugins.chat.cache import ChatCache, cache_key
from vlr_plugins.chat.factory import BACKEND_TYPES, ChatBackend, build_backend, check_role, missing_key
from vlr_plugins.chat.json_answer import REASK_PROMPT, MalformedAnswer, parse_json_answer, reask_messages
from vlr_plugins.chat.media import (
    VIDEO_TRANSPORTS,
    image_part,
    media_of,
    template_messages,
    to_openai_messages,
    video_part,
)
from vlr_plugins.chat.request import ChatRequest, ChatResult, ChatSettings, EndpointError
from vlr_plugins.chat.retry import RetryPolicy, retry_after_seconds, retryable_status
from vlr_plugins.chat.summary import RunSummary

__all__ = [
    "BACKEND_TYPES",
    "BatchedChatBackend",
    "ChatBackend",
    "ChatCache",
    "ChatRequest",
    "ChatResult",
    "ChatSettings",
    "EndpointError",
    "MalformedAnswer",
    "OpenAIChatClient",
    "REASK_PROMPT",
    "RetryPolicy",
    "RunSummary",
    "TransformersChatBackend",
    "VIDEO_TRANSPORTS",
    "VLLMChatBackend",
    "build_backend",
    "cache_key",
    "check_role",
    "image_part",
    "media_of",
    "missing_key",
    "parse_json_answer",
    "reask_messages",
    "retry_after_seconds",
    "retryable_status",
    "template_messages",
    "to_openai_messages",
    "video_part",
    "vllm_sampling",
]

_LAZY = {
    "BatchedChatBackend": "vlr_plugins.chat.batched",
    "OpenAIChatClient": "vlr_plugins.chat.openai_chat",
    "TransformersChatBackend": "vlr_plugins.chat.transformers_chat",
    "VLLMChatBackend": "vlr_plugins.chat.vllm_chat",
    "vllm_sampling": "vlr_plugins.chat.vllm_chat",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
