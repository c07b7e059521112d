"""What every local (batch-generating) backend shares: the cache, re-asks and failures,
around one ``generate(batch)`` that each backend writes."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from vlr_plugins.chat.cache import ChatCache, cache_key
from vlr_plugins.chat.json_answer import malformed_error, reask_messages
from vlr_plugins.chat.request import ChatRequest, ChatResult
from vlr_plugins.chat.summary import RunSummary

__all__ = ["BatchedChatBackend"]

log = logging.getLogger(__name__)


class BatchedChatBackend:
    """A backend that answers many requests in one batched generation call.

    :meth:`complete_many` answers ``requests`` in rounds: the answers not in ``cache`` are
    generated together (:meth:`generate_batch`, which a subclass writes); each answer that
    its request's ``parse`` refuses is asked again in the next round, naming the problem,
    up to ``reasks`` times, then it is a failed :class:`ChatResult` (never a silent value).
    A request whose inputs cannot be prepared (a missing image) fails alone. Results come
    back in input order, as from :class:`~vlr_plugins.chat.OpenAIChatClient`, so the
    pipelines drive every backend alike.

    ``model_name`` keys the cache (with the messages and the sampling), so answers are
    shared with a rerun, and with another backend serving the same model.
    """

    #: requests are gathered into batches (one generation call per round)
    batched = True

    def __init__(self, model_name: str, *, reasks: int = 2, cache: ChatCache | None = None,
                 batch_size: int = 8) -> None:
        if not isinstance(reasks, int) or isinstance(reasks, bool) or reasks < 0:
            raise ValueError(f"reasks: expected an integer >= 0, found {reasks!r}")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"batch_size: expected an integer >= 1, found {batch_size!r}")
        self.model_name = model_name
        self.reasks = reasks
        self.cache = cache
        self.batch_size = batch_size
        self.summary = RunSummary()

    @property
    def concurrency(self) -> int:
        return self.batch_size

    def generate_batch(self, batch: Sequence[tuple[list[dict[str, Any]], dict[str, Any]]]) -> list[str | Exception]:
        """Answers to ``(messages, sampling)`` pairs, in order: a text, or the exception
        that kept this one request from being generated (e.g. an unreadable image)."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"backend": type(self).__name__, "model": self.model_name}

    def close(self) -> None:
        pass

    def __enter__(self) -> BatchedChatBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def complete(self, request: ChatRequest | Sequence[Mapping[str, Any]]) -> ChatResult:
        return self.complete_many([request])[0]

    def complete_many(self, requests: Sequence[ChatRequest | Sequence[Mapping[str, Any]]],
                      *, desc: str = "generate") -> list[ChatResult]:
        reqs = [r if isinstance(r, ChatRequest) else ChatRequest(messages=r) for r in requests]
        self.summary.add(requests=len(reqs))
        results: list[ChatResult | None] = [None] * len(reqs)
        messages = {i: [dict(m) for m in r.messages] for i, r in enumerate(reqs)}
        sampling = [dict(r.sampling or {}) for r in reqs]
        for tries in range(1, self.reasks + 2):
            pending = [i for i in range(len(reqs)) if results[i] is None]
            if not pending:
                break
            answers = self._answers([(messages[i], sampling[i]) for i in pending])
            for i, answer in zip(pending, answers):
                if isinstance(answer, Exception):
                    self.summary.add(failures=1)
                    results[i] = ChatResult(error=f"cannot generate: {answer}")
                    continue
                if reqs[i].parse is None:
                    results[i] = ChatResult(text=answer)
                    continue
                try:
                    results[i] = ChatResult(text=answer, value=reqs[i].parse(answer))
                    continue
                except ValueError as e:
                    problem = str(e)
                    self.summary.add(malformed=1)
                if tries > self.reasks:
                    self.summary.add(failures=1)
                    results[i] = ChatResult(text=answer, error=malformed_error(tries, problem))
                else:
                    self.summary.add(reasks=1)
                    messages[i] = reask_messages(messages[i], answer, problem)
        return results  # type: ignore[return-value]

    def _answers(self, items: list[tuple[list[dict[str, Any]], dict[str, Any]]]) -> list[str | Exception]:
        out: list[str | Exception | None] = [None] * len(items)
        keys = [cache_key(self.model_name, m, s) for m, s in items]
        if self.cache is not None:
            for i, key in enumerate(keys):
                out[i] = self.cache.get(key)
            self.summary.add(cache_hits=sum(a is not None for a in out))
        missing = [i for i, a in enumerate(out) if a is None]
        for start in range(0, len(missing), self.batch_size):
            chunk = missing[start:start + self.batch_size]
            answers = self.generate_batch([items[i] for i in chunk])
            self.summary.add(calls=len(chunk))
            for i, answer in zip(chunk, answers):
                out[i] = answer
                if self.cache is not None and isinstance(answer, str):
                    m, s = items[i]
                    self.cache.put(keys[i], {"model": self.model_name, "messages": m, "params": s}, answer)
        return out  # type: ignore[return-value]
