"""Running a pipeline over a Ray cluster with Ray Data: the same parts, written by actors.

The driver checks the run (:meth:`CorpusRun.prepare`), reads the input once, and makes a
Ray Dataset of the parts still missing (one row per part: its index and its records).
``map_batches`` sends them to a pool of ``workers`` actors; each actor builds the
pipeline's backends once (a vLLM engine on its GPUs, or clients of OpenAI-compatible
servers) and runs :meth:`CorpusRun.process_part`, which writes each stage's part once,
atomically, as a single-process run does. So the records do not depend on the engine,
and a stopped Ray job is finished by running it again (or by ``vlr generate`` without
Ray). When every part is there, the driver merges the corpus and writes the manifest.

This is the pattern of Ray Data's LLM batch inference (``ray.data.llm``: actors that
each hold a vLLM engine, fed by a Dataset), with a pipeline's multi-step records as the
unit of work instead of single prompts.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vlr_plugins._ray import default_workers, import_ray, init_ray

__all__ = ["generate_corpus_ray"]


class _PartWorker:
    """A Ray Data actor: one :class:`CorpusRun` (its backends built once), parts in, stats out."""

    def __init__(self, pipeline: Any, input_path: str, out: str, cache: Any, stages: Sequence[str] | None) -> None:
        from vlr_plugins.generate.runner import CorpusRun

        self.stages = list(stages) if stages else None
        self.run = CorpusRun(pipeline, input_path, out, cache=cache, report=lambda line: None)
        self.run.run = self.run.folder.read_run()

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, list[Any]]:
        parts, records, seconds, failures = [], [], [], []
        for k, payload in zip(batch["part"], batch["records"]):
            start = time.monotonic()
            items = json.loads(payload)
            stats = self.run.process_part(int(k), lambda items=items: items, self.stages)
            parts.append(int(k))
            records.append(max((s["records"] for s in stats.values()), default=0))
            seconds.append(time.monotonic() - start)
            failures.append(json.dumps({s: {"failed": v["failed"], "first_failure": v["first_failure"]}
                                        for s, v in stats.items()}))
        return {"part": parts, "records": records, "seconds": seconds, "failures": failures}

    def __del__(self) -> None:
        try:
            self.run.close()
        except Exception:  # an actor torn down mid-call: the cache and clients die with it
            pass


def generate_corpus_ray(pipeline: Any, input_path: str | os.PathLike[str], out: str | os.PathLike[str], *,
                        stages: Sequence[str] | None = None, cache: str | os.PathLike[str] | None = "default",
                        merge: bool = True, limit: int | None = None, address: str | None = None,
                        workers: int | None = None, num_gpus: float | None = None,
                        report: Callable[[str], None] | None = None) -> dict[str, Any]:
    """:func:`~vlr_plugins.generate.generate_corpus` with the parts spread over Ray actors.

    ``address``: the cluster (``ray.init(address)``; default ``RAY_ADDRESS``, else a local
    Ray); ``workers``: actors (default: the cluster's GPUs when a role runs on this machine's
    GPUs (``vllm``, ``transformers``), else its CPUs); ``num_gpus``: GPUs per actor (default:
    the largest ``tensor_parallel_size`` of a vllm role, 1 for transformers, 0 for HTTP roles).
    ``out`` (and ``cache``) must be a folder every node sees (a shared file system).

    The answer cache is SQLite: actors on one node share it; on several nodes give each its
    own (``cache=None`` keeps none: a rerun then asks again what a killed part had asked).
    Returns the same mapping as :func:`~vlr_plugins.generate.generate_corpus`.
    """
    ray = import_ray()
    from vlr_plugins.generate.pipeline import Pipeline, load_pipeline
    from vlr_plugins.generate.runner import discard_unstarted

    pipeline = pipeline if isinstance(pipeline, Pipeline) else load_pipeline(pipeline)
    created = not os.path.exists(out)
    try:
        return _generate_ray(ray, pipeline, input_path, out, stages=stages, cache=cache, merge=merge, limit=limit,
                             address=address, workers=workers, num_gpus=num_gpus, report=report or print)
    except Exception:
        if created:
            discard_unstarted(out)
        raise


def _generate_ray(ray: Any, pipeline: Any, input_path: str | os.PathLike[str], out: str | os.PathLike[str], *,
                  stages: Sequence[str] | None, cache: str | os.PathLike[str] | None, merge: bool, limit: int | None,
                  address: str | None, workers: int | None, num_gpus: float | None,
                  report: Callable[[str], None]) -> dict[str, Any]:
    from vlr_plugins.generate.runner import CorpusRun, FailureCount

    with CorpusRun(pipeline, input_path, out, cache=cache, limit=limit) as run:
        info = run.prepare(stages)
        names = list(stages or info["stages"])
        todo = sorted(k for k in range(info["input"]["parts"]) if any(not run.folder.has_part(s, k) for s in names))
        rows = [{"part": k, "records": json.dumps(records)} for k, records in run.input_parts(set(todo))]
        local = {s.role for s in pipeline.stages if s.name in names
                 and pipeline.roles[s.role]["backend"] in ("vllm", "transformers")}
        if num_gpus is None:
            num_gpus = max([float(pipeline.roles[r].get("tensor_parallel_size", 1)) for r in local] or [0.0])
        init_ray(ray, address)
        if workers is None:
            workers = default_workers(ray, num_gpus)
        workers = max(1, min(workers, len(rows) or 1))
        start, done_records, done_parts, failures = time.monotonic(), 0, 0, FailureCount()
        if rows:
            dataset = ray.data.from_items(rows, override_num_blocks=len(rows))
            results = dataset.map_batches(
                _PartWorker, batch_size=1, concurrency=workers, num_gpus=num_gpus or None,
                fn_constructor_kwargs={"pipeline": pipeline, "input_path": os.path.abspath(input_path),
                                       "out": os.path.abspath(out),
                                       "cache": cache if cache in (None, "default") else os.path.abspath(cache),
                                       "stages": names if stages else None})
            for row in results.iter_rows():
                done_parts += 1
                done_records += int(row["records"])
                failures.add(json.loads(row["failures"]))
                elapsed = time.monotonic() - start
                report(f"part {int(row['part']) + 1}/{info['input']['parts']} done on Ray: {done_parts}/{len(rows)} "
                       f"parts, {done_records / elapsed if elapsed > 0 else 0.0:.2f} records/s over {workers} workers")
        elapsed = time.monotonic() - start
        complete = run.complete()
        manifest = run.finalize(merge) if complete else None
        return {"out": str(run.folder.root), "records": info["input"]["records"], "parts": info["input"]["parts"],
                "parts_run": done_parts, "records_per_s": done_records / elapsed if elapsed > 0 and done_records else 0.0,
                "complete": complete, "manifest": manifest, "backends": {}, "workers": workers,
                "records_run": done_records, **failures.as_dict()}
