"""Running one stage's step over many records with one backend.

* A batched backend (vLLM, transformers) gets every record's next requests at once: the
  records advance in lockstep, one generation call per round, so the engine sees the
  largest batches there are.
* A backend that answers requests side by side (an HTTP server) gets records side by
  side: ``backend.concurrency`` records in flight, each asking its next requests as soon
  as its last ones are answered, so that the server's queue never drains between rounds.

Results come back in the records' order either way, and a step sees the same answers on
every backend, so the records do not depend on the driver.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any

from vlr_plugins.chat.request import ChatRequest, ChatResult
from vlr_plugins.generate.stage import Stage, StepContext

__all__ = ["run_step"]

_Gen = Generator[list[ChatRequest], list[ChatResult], dict[str, Any]]


def _start(gen: _Gen) -> tuple[list[ChatRequest] | None, dict[str, Any] | None]:
    try:
        return next(gen), None
    except StopIteration as stop:
        return None, stop.value


def _send(gen: _Gen, results: list[ChatResult]) -> tuple[list[ChatRequest] | None, dict[str, Any] | None]:
    try:
        return gen.send(results), None
    except StopIteration as stop:
        return None, stop.value


def _lockstep(records: Sequence[dict[str, Any]], stage: Stage, ctx: StepContext, backend: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any] | None] = [None] * len(records)
    gens = {i: stage.step(r, ctx) for i, r in enumerate(records)}
    asked: dict[int, list[ChatRequest]] = {}
    for i, gen in gens.items():
        asked_i, done = _start(gen)
        if asked_i is None:
            out[i] = done
        else:
            asked[i] = asked_i
    while asked:
        order = list(asked)
        flat = [req for i in order for req in asked[i]]
        results = backend.complete_many(flat, desc=stage.name)
        at, previous, asked = 0, asked, {}
        for i in order:
            got = results[at:at + len(previous[i])]
            at += len(previous[i])
            nxt, done = _send(gens[i], got)
            if nxt is None:
                out[i] = done
            else:
                asked[i] = nxt
    return out  # type: ignore[return-value]


def _one_record(record: dict[str, Any], stage: Stage, ctx: StepContext, backend: Any) -> dict[str, Any]:
    gen = stage.step(record, ctx)
    asked, done = _start(gen)
    while asked is not None:
        asked, done = _send(gen, backend.complete_many(asked, desc=stage.name))
    return done  # type: ignore[return-value]


def _side_by_side(records: Sequence[dict[str, Any]], stage: Stage, ctx: StepContext,
                  backend: Any) -> list[dict[str, Any]]:
    pool = ThreadPoolExecutor(max_workers=max(1, backend.concurrency), thread_name_prefix="vlr-record")
    try:
        futures = [pool.submit(_one_record, r, stage, ctx, backend) for r in records]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for f in done:
            if f.exception() is not None:
                raise f.exception()  # an endpoint that refuses everything: stop, write nothing
        return [f.result() for f in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def run_step(records: Sequence[dict[str, Any]], stage: Stage, ctx: StepContext, backend: Any) -> list[dict[str, Any]]:
    """``stage.step`` applied to every record with ``backend``; the new records, in order."""
    if not records:
        return []
    if getattr(backend, "batched", False):
        return _lockstep(records, stage, ctx, backend)
    return _side_by_side(records, stage, ctx, backend)
