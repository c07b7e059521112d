"""A pipeline stage: one role (model) and a step that turns one record into its next form.

A step is a generator function ``step(record, ctx)``: it yields the list of
:class:`~vlr_plugins.chat.ChatRequest` it needs next, receives their
:class:`~vlr_plugins.chat.ChatResult` list (same order), and returns the new record.
It never calls a model itself, so one step runs on every backend: a driver
(:mod:`vlr_plugins.generate.driver`) gathers the requests of many records into batches
(vLLM, transformers) or runs records side by side (HTTP).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from vlr_plugins.chat.request import ChatRequest, ChatResult
from vlr_plugins.generate.templates import PromptSpec

__all__ = ["Stage", "StepContext", "Step", "record_seed", "failure_entry"]

Step = Callable[[dict[str, Any], "StepContext"], Generator[list[ChatRequest], list[ChatResult], dict[str, Any]]]


def record_seed(base: int, record_id: str, *keys: object) -> int:
    """A seed for one call of one record: a 31-bit hash of the run's ``base`` seed, the
    record's id and ``keys`` (prompt, attempt). The same record gets the same seeds in any
    shard, on any machine, in any order; a regenerated paragraph gets a new one."""
    text = "\x1f".join(str(k) for k in (base, record_id, *keys))
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16) & 0x7FFFFFFF


def failure_entry(stage: str, prompt: str, result: ChatResult, **extra: Any) -> dict[str, Any]:
    """The audit entry of a request left without a usable answer: where, why, and the last
    answer the model gave (``None`` when no call succeeded)."""
    return {"stage": stage, "prompt": prompt, **extra, "error": result.error, "answer": result.text}


@dataclass(frozen=True)
class StepContext:
    """What a step may read: the stage, the prompts, the run's seed and the pipeline's options."""

    stage: str
    prompts: Mapping[str, PromptSpec]
    seed: int
    options: Mapping[str, Any]
    models: Mapping[str, str]

    def request(self, prompt: str, record_id: str, media: list[dict[str, Any]], *, parse: Callable[[str], Any],
                attempt: int = 1, **values: str) -> ChatRequest:
        """The request of ``prompt`` for one record: its messages, its parser, and its
        sampling with the record's seed for this prompt and attempt."""
        spec = self.prompts[prompt]
        seed = record_seed(self.seed, record_id, prompt, attempt)
        return ChatRequest(spec.messages(media, **values), parse=parse, sampling={**spec.sampling, "seed": seed})

    def model_of(self, prompt: str) -> str:
        """The model name answering ``prompt`` (for the record's ``generated_by``)."""
        return self.models[self.prompts[prompt].role]


@dataclass(frozen=True)
class Stage:
    """One stage: its ``name`` (the output folder), the ``role`` whose backend answers its
    requests, and its ``step``."""

    name: str
    role: str
    step: Step
