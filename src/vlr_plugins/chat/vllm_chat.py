"""Generation with vLLM's offline engine on this machine's GPUs: the throughput path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vlr_plugins.chat.batched import BatchedChatBackend
from vlr_plugins.chat.cache import ChatCache
from vlr_plugins.chat.media import VIDEO_TRANSPORTS, to_openai_messages
from vlr_plugins.errors import ConfigError

__all__ = ["VLLMChatBackend", "vllm_sampling"]

_SAMPLING = ("temperature", "top_p", "top_k", "max_tokens", "seed", "repetition_penalty", "presence_penalty",
             "frequency_penalty", "stop")


def _import_vllm():
    try:
        import vllm
    except ImportError as e:
        raise ConfigError("backend vllm needs the vllm package and a CUDA GPU (pip install vllm; see "
                          "docs/generate.md); without one, serve the model elsewhere and use backend openai") from e
    return vllm


def vllm_sampling(sampling: Mapping[str, Any]) -> dict[str, Any]:
    """A request's sampling (OpenAI names) as ``vllm.SamplingParams`` arguments; the names
    are the same, and ``None`` values are left to vLLM's defaults."""
    return {k: v for k, v in sampling.items() if k in _SAMPLING and v is not None}


class VLLMChatBackend(BatchedChatBackend):
    """Answers chat requests with ``vllm.LLM.chat``: every pending request of a round in one
    call, which vLLM schedules with continuous batching over its GPUs.

    Expects a model vLLM serves (``model``: Hub id or folder) and its engine settings
    (``tensor_parallel_size``, ``gpu_memory_utilization``, ``max_model_len``, ``dtype``,
    ``limit_mm_per_prompt`` such as ``{"image": 16}`` for 16 video frames sent as images,
    ``max_num_seqs``, ``enforce_eager``, ``trust_remote_code``); or an ``llm=`` already
    built. Messages go in the OpenAI format (:func:`~vlr_plugins.chat.media.to_openai_messages`),
    each request with its own ``SamplingParams`` (its seed included, so an answer does not
    depend on which requests share its batch). ``chat_template_kwargs`` go to the chat
    template (``{"enable_thinking": true}`` for Qwen3 hybrids).

    A request whose media cannot be read fails alone; a batch that vLLM refuses as a whole
    (a prompt over ``max_model_len``) is retried one request at a time, so that only the
    offending requests fail. Re-asks, the cache and failures: :class:`BatchedChatBackend`.
    """

    def __init__(self, model: str, *, llm: Any = None, reasks: int = 2, cache: ChatCache | None = None,
                 batch_size: int = 4096, video_transport: str = "frames",
                 chat_template_kwargs: Mapping[str, Any] | None = None, **engine: Any) -> None:
        if video_transport not in VIDEO_TRANSPORTS:
            raise ConfigError(f"video_transport: expected one of {', '.join(VIDEO_TRANSPORTS)}, "
                              f"found {video_transport!r}")
        super().__init__(model, reasks=reasks, cache=cache, batch_size=batch_size)
        self.video_transport = video_transport
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.engine_settings = dict(engine)
        if llm is None:
            vllm = _import_vllm()
            llm = vllm.LLM(model=model, **engine)
        self.llm = llm

    def describe(self) -> dict[str, Any]:
        return {"backend": "vllm", "model": self.model_name, "engine": self.engine_settings,
                "video_transport": self.video_transport}

    def generate_batch(self, batch: Sequence[tuple[list[dict[str, Any]], dict[str, Any]]]) -> list[str | Exception]:
        from vllm import SamplingParams

        out: list[str | Exception | None] = [None] * len(batch)
        ready: list[tuple[int, list[dict[str, Any]], Any]] = []
        for i, (messages, sampling) in enumerate(batch):
            try:
                ready.append((i, to_openai_messages(messages, video_transport=self.video_transport),
                              SamplingParams(**vllm_sampling(sampling))))
            except (OSError, ValueError) as e:
                out[i] = e
        if ready:
            try:
                texts = self._chat([r[1] for r in ready], [r[2] for r in ready])
            except ValueError:  # one request refused the whole call: find it, answer the others
                texts = []
                for r in ready:
                    try:
                        texts.extend(self._chat([r[1]], [r[2]]))
                    except ValueError as e:
                        texts.append(e)
            for (i, *_), text in zip(ready, texts):
                out[i] = text
        return out  # type: ignore[return-value]

    def _chat(self, conversations: list[list[dict[str, Any]]], params: list[Any]) -> list[str]:
        kw = {"chat_template_kwargs": self.chat_template_kwargs} if self.chat_template_kwargs else {}
        outputs = self.llm.chat(conversations, sampling_params=params, use_tqdm=False, **kw)
        self.summary.add(prompt_tokens=sum(len(o.prompt_token_ids or []) for o in outputs),
                         completion_tokens=sum(len(o.outputs[0].token_ids) for o in outputs))
        return [o.outputs[0].text for o in outputs]
