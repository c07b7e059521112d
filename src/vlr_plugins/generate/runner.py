"""Running a pipeline over an input file into a corpus folder: resumable, idempotent, sharded.

The input is cut into parts of ``records_per_part`` records; part ``k`` goes through every
stage in turn, and each stage's part is written once, whole (:class:`~vlr_plugins.generate.corpus.CorpusFolder`).
A rerun skips every part already written, so after a ``kill -9`` at any point the rerun
ends with the same corpus: nothing lost (a part is there whole or not at all), nothing
twice (a part is written once), the same text (the answers of the interrupted part are in
the cache, and every call carries a per-record seed).

Shards: worker ``i`` of ``n`` does the parts ``k`` with ``k % n == i`` (a job array), and
whichever worker sees the last part written merges the corpus and writes the manifest.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from vlr_plugins._io import atomic_write_json, atomic_write_text
from vlr_plugins.chat.cache import ChatCache
from vlr_plugins.chat.factory import build_backend, missing_key
from vlr_plugins.errors import ConfigError, DataFormatError, MissingFileError, UsageError, UserError
from vlr_plugins.generate.corpus import CorpusFolder
from vlr_plugins.generate.driver import run_step
from vlr_plugins.generate.pipeline import Pipeline, load_pipeline

__all__ = ["CorpusRun", "FailureCount", "discard_unstarted", "generate_corpus", "merge_parts"]

log = logging.getLogger(__name__)
_RUN_FORMAT = "vlr-generate-run"


def _file_sha256(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class CorpusRun:
    """One worker's view of a run: the pipeline, the input, the output folder, the backends.

    Expects a :class:`~vlr_plugins.generate.Pipeline` (or a name / file for
    :func:`~vlr_plugins.generate.load_pipeline`), the input file, and the output folder.
    ``cache``: the answer cache (``"default"``: ``OUT/llm-cache.sqlite``; ``None``: none);
    ``backends``: ready backends by role, used instead of building the pipeline's (tests,
    a model already in memory); ``limit``: only the first records of the input.

    :meth:`prepare` checks everything and creates the folder; :meth:`process_part` runs
    the stages a part lacks. :func:`generate_corpus` and the Ray runner drive them.
    """

    def __init__(self, pipeline: Pipeline | str | os.PathLike[str], input_path: str | os.PathLike[str],
                 out: str | os.PathLike[str], *, cache: str | os.PathLike[str] | None = "default",
                 backends: Mapping[str, Any] | None = None, limit: int | None = None,
                 report: Callable[[str], None] | None = None) -> None:
        self.pipeline = pipeline if isinstance(pipeline, Pipeline) else load_pipeline(pipeline)
        self.input_path = Path(input_path)
        self.folder = CorpusFolder(out)
        self.cache_path = self.folder.root / "llm-cache.sqlite" if cache == "default" else cache
        self.limit = limit
        self.report = report or log.info
        self._given = dict(backends or {})
        self._backends: dict[str, Any] = {}
        self._cache: ChatCache | None = None
        self.run: dict[str, Any] | None = None

    # ---------------------------------------------------------------- input
    def read_input(self) -> Iterator[dict[str, Any]]:
        """The input records (checked by the pipeline's reader), at most ``limit`` of them."""
        records = self.pipeline.kind.read_input(self.input_path, self.pipeline.input, self.pipeline.options)
        for n, record in enumerate(records):
            if self.limit is not None and n >= self.limit:
                return
            yield record

    def input_parts(self, wanted: set[int]) -> Iterator[tuple[int, list[dict[str, Any]]]]:
        """``(k, records)`` for each part ``k`` in ``wanted``, reading the input once."""
        size, part, k = self.pipeline.records_per_part, [], 0
        for record in self.read_input():
            part.append(record)
            if len(part) == size:
                if k in wanted:
                    yield k, part
                part, k = [], k + 1
        if part and k in wanted:
            yield k, part

    # ---------------------------------------------------------------- checks
    def prepare(self, stages: Sequence[str] | None = None) -> dict[str, Any]:
        """Check the stages, the input (every record, before any call), the keys the
        stages' roles read; then create the folder and write ``run.json`` (or check that
        an existing one was made by the same pipeline from the same input). Returns it."""
        names = [s.name for s in self.pipeline.stages]
        for name in stages or ():
            self.pipeline.stage(name)
        if not self.input_path.is_file():
            raise MissingFileError(f"{self.input_path}: no such input file")
        count = sum(1 for _ in self.read_input())
        if count == 0:
            raise UserError(f"{self.input_path}: no input records")
        roles = {self.pipeline.stage(n).role for n in (stages or names)}
        for role in sorted(roles - set(self._given)):
            env = missing_key(self.pipeline.roles[role])
            if env:
                raise ConfigError(f"roles.{role}: no API key: set the environment variable {env} (a local server "
                                  "without authentication takes any value, e.g. EMPTY)")
        size = self.pipeline.records_per_part
        run = {"format": _RUN_FORMAT, "version": 1, "pipeline": self.pipeline.describe(),
               "records_per_part": size, "stages": names,
               "input": {"file": self.input_path.name, "sha256": _file_sha256(self.input_path), "limit": self.limit,
                         "records": count, "parts": -(-count // size)}}
        self.folder.root.mkdir(parents=True, exist_ok=True)
        earlier = self.folder.read_run()
        if earlier is None:
            self.folder.write_run(run)
            atomic_write_text(self.folder.root / "pipeline.yaml",
                              yaml.safe_dump(self.pipeline.raw, sort_keys=False, allow_unicode=True))
        else:
            _check_same(earlier, run, self.folder.run_file)
            run = earlier
        self.run = run
        return run

    # ---------------------------------------------------------------- work
    def backend(self, role: str) -> Any:
        if role in self._given:
            given, model = self._given[role], self.pipeline.roles[role]["model"]
            # records name the role's model (generated_by, the cache keys): it must be the one answering
            if given.describe().get("model") != model:
                raise ConfigError(f"roles.{role}.model is {model!r}, but the backend given for it serves "
                                  f"{given.describe().get('model')!r}; set the role's model to the backend's")
            return given
        if role not in self._backends:
            if self._cache is None and self.cache_path is not None:
                self._cache = ChatCache(self.cache_path)
            self._backends[role] = build_backend(self.pipeline.roles[role], cache=self._cache, where=f"roles.{role}")
        return self._backends[role]

    def process_part(self, k: int, input_records: Callable[[], list[dict[str, Any]]],
                     stages: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
        """Run the stages (all, or those named) that part ``k`` lacks; returns, per stage
        run, ``{"records", "seconds", "failed": the ids of records with a failure of this
        stage, "first_failure": the first (``{"id", "stage", "prompt", "error", ...}``) or
        None}``. A stage reads the part the stage before it wrote. A stage whose every
        request failed raises instead of writing (:meth:`_refuse_all_failed`)."""
        selected = set(stages or [s.name for s in self.pipeline.stages])
        kind = self.pipeline.kind
        done: dict[str, dict[str, Any]] = {}
        records: list[dict[str, Any]] | None = None
        for j, stage in enumerate(self.pipeline.stages):
            if stage.name not in selected or self.folder.has_part(stage.name, k):
                records = None
                continue
            if records is None:
                if j == 0:
                    records = input_records()
                else:
                    before = self.pipeline.stages[j - 1].name
                    if not self.folder.has_part(before, k):
                        raise UserError(f"stage {stage.name}: part {k} of stage {before} is missing from "
                                        f"{self.folder.stage_dir(before)}; run stage {before} first")
                    records = [kind.unpack(r) for r in self.folder.read_part(before, k)]
            start = time.monotonic()
            backend = self.backend(stage.role)
            asked = backend.summary.as_dict()
            records = run_step(records, stage, self.pipeline.context(stage), backend)
            self._refuse_all_failed(records, stage, k, asked, backend.summary.as_dict())
            failed = _new_failures(records, stage.name)
            path = self.folder.part(stage.name, k)
            for line, record in enumerate(records, start=1):
                kind.check_record(record, path, line)
            self.folder.write_part(stage.name, k, [kind.pack(r) for r in records], kind.fields)
            # the next stage reads what was written, as a rerun would
            records = [kind.unpack(r) for r in self.folder.read_part(stage.name, k)]
            done[stage.name] = {"records": len(records), "seconds": time.monotonic() - start,
                                "failed": sorted({rid for rid, _ in failed}),
                                "first_failure": {"id": failed[0][0], **failed[0][1]} if failed else None}
        return done

    def _refuse_all_failed(self, records: list[dict[str, Any]], stage: Any, k: int, before: dict[str, int],
                           after: dict[str, int]) -> None:
        """Raise rather than write a part of a stage whose every request failed:

        - without any answer, for a reason of the endpoint (down, unreachable, timing out, a
          body that is not a chat completion): always, since such a part would hold only
          failures and a rerun would skip it;
        - for any reason (answers still malformed after the re-asks, media that cannot be
          read), while no part of the stage is written yet: the stage generates nothing
          (another model than the prompts expect, too few ``max_tokens``), and stopping
          at its first part costs one part, not the run. Later, such a part is written
          with its recorded failures, so that one bad part cannot keep a run from finishing.
        """
        requests, failures = after["requests"] - before["requests"], after["failures"] - before["failures"]
        if not requests or failures < requests:
            return
        new = _new_failures(records, stage.name)
        first = f"record {new[0][0]!r}, prompt {new[0][1].get('prompt')}: {new[0][1].get('error')}" if new else "?"
        if new and all(f.get("answer") is None and not str(f.get("error", "")).startswith("cannot") for _, f in new):
            raise UserError(f"stage {stage.name}, part {k}: all {requests} requests failed without an answer "
                            f"(the first: {new[0][1]['error']}); nothing was written for this part: check "
                            f"roles.{stage.role} (base_url, the server, the network) and run again")
        parts = self.run["input"]["parts"] if self.run else k + 1
        if len(self.folder.missing_parts(stage.name, parts)) < parts:
            return
        cached = ""
        if self.cache_path is not None and Path(self.cache_path).exists():
            cached = (f"; the answers received are kept in {self.cache_path} (a rerun reads them again: "
                      "remove it, or give --no-cache, to ask anew)")
        raise UserError(f"stage {stage.name}, part {k}: all {requests} requests failed and no part of the "
                        f"stage is written yet (the first: {first}); nothing was written for this part: check "
                        f"roles.{stage.role} (the model it serves, the prompts, their sampling) and run "
                        f"again{cached}")

    def complete(self) -> bool:
        parts = self.run["input"]["parts"]
        return all(not self.folder.missing_parts(s.name, parts) for s in self.pipeline.stages)

    def finalize(self, merge: bool = True) -> dict[str, Any]:
        return self.folder.finalize(self.run, [s.name for s in self.pipeline.stages], merge=merge)

    def summaries(self) -> dict[str, Any]:
        backends = {**self._given, **self._backends}
        return {role: {**b.describe(), **b.summary.as_dict()} for role, b in backends.items()}

    def close(self) -> None:
        for b in self._backends.values():
            b.close()
        if self._cache is not None:
            self._cache.close()

    def __enter__(self) -> CorpusRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _new_failures(records: list[dict[str, Any]], stage: str) -> list[tuple[str, dict[str, Any]]]:
    """``(record id, failure)`` for each failure ``stage`` recorded, in the records' order."""
    return [(str(r.get("id")), f) for r in records for f in (r.get("failures") or []) if f.get("stage") == stage]


def discard_unstarted(root: str | os.PathLike[str]) -> None:
    """After a run that created ``root`` stopped before any part was written: remove what it
    wrote there (``run.json``, ``pipeline.yaml``, ``progress/``), and ``root`` when nothing
    else is left. A cache that holds answers stays (it is created with the first one)."""
    root = Path(root)
    stages = root / "stages"
    if not root.is_dir() or (stages.exists() and any(p.is_file() for p in stages.rglob("*"))):
        return
    for name in ("run.json", "pipeline.yaml"):
        with contextlib.suppress(FileNotFoundError):
            (root / name).unlink()
    for folder in (root / "progress", stages):
        shutil.rmtree(folder, ignore_errors=True)
    if not any(root.iterdir()):
        root.rmdir()


class FailureCount:
    """The records of a run that carry a failure, from :meth:`CorpusRun.process_part`'s stats."""

    def __init__(self) -> None:
        self.records = 0
        self.first: dict[str, Any] | None = None

    def add(self, stats: Mapping[str, Mapping[str, Any]]) -> None:
        """One part's stats (stage -> ``{"failed": ids, "first_failure"}``)."""
        self.records += len({rid for s in stats.values() for rid in s.get("failed", ())})
        if self.first is None:
            self.first = next((s["first_failure"] for s in stats.values() if s.get("first_failure")), None)

    def as_dict(self) -> dict[str, Any]:
        return {"failed_records": self.records, "first_failure": self.first}


def _check_same(earlier: dict[str, Any], now: dict[str, Any], where: Path) -> None:
    if earlier.get("format") != _RUN_FORMAT:
        raise UserError(f"{where}: not a `vlr generate` run file; give another --out")
    for what, a, b in (("pipeline", earlier["pipeline"]["fingerprint"], now["pipeline"]["fingerprint"]),
                       ("input file", earlier["input"]["sha256"], now["input"]["sha256"]),
                       ("number of input records", earlier["input"]["records"], now["input"]["records"])):
        if a != b:
            raise UserError(f"{where}: this folder holds a run of another {what} ({a!s:.12} there, {b!s:.12} now); "
                            "a rerun must use the same pipeline (prompts, models, sampling, seed, part size) and "
                            "input: give another --out, or remove the folder to start over")


def generate_corpus(pipeline: Pipeline | str | os.PathLike[str], input_path: str | os.PathLike[str],
                    out: str | os.PathLike[str], *, stages: Sequence[str] | None = None, shard_index: int = 0,
                    shard_count: int = 1, cache: str | os.PathLike[str] | None = "default", merge: bool = True,
                    limit: int | None = None, backends: Mapping[str, Any] | None = None,
                    report: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Generate (or finish) the corpus of ``pipeline`` over ``input_path`` into ``out``.

    Runs the parts of shard ``shard_index`` of ``shard_count`` through ``stages`` (default:
    all), skipping what is already written; when every part of every stage is there, merges
    ``corpus.jsonl`` (unless ``merge=False``) and writes ``manifest.json``. Progress goes to
    ``report`` (one line per part: records, records/s) and to ``OUT/progress/``.

    Returns ``{"out", "records", "parts", "parts_run", "records_per_s", "complete",
    "manifest" (or None), "backends", "records_run", "failed_records", "first_failure"}``:
    ``failed_records`` counts the records this run generated that carry a failure (they are
    in the corpus with it), ``first_failure`` is the first of them (``{"id", "stage",
    "prompt", "error", ...}``) or ``None``. A stage whose every request of a part failed
    stops the run (:meth:`CorpusRun.process_part`); a run stopped before it wrote any part
    leaves no corpus folder behind (only a cache that holds answers).

    Example::

        >>> generate_corpus("paragraph", "cc3m_500k.jsonl", "corpus/")  # doctest: +SKIP
        >>> read_paragraph_samples("corpus/corpus.jsonl", media_key="image")  # doctest: +SKIP
    """
    for name, value, low in (("shard_index", shard_index, 0), ("shard_count", shard_count, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{name}: expected an integer >= {low}, found {value!r}")
    if shard_index >= shard_count:
        raise ConfigError(f"shard_index: expected 0 .. {shard_count - 1} (shard_count {shard_count}), "
                          f"found {shard_index}")
    # a folder of a job array's shards is shared: only a run on its own cleans up after itself
    created = shard_count == 1 and not Path(out).exists()
    try:
        return _generate(pipeline, input_path, out, stages=stages, shard_index=shard_index, shard_count=shard_count,
                         cache=cache, merge=merge, limit=limit, backends=backends, report=report)
    except Exception:
        if created:
            discard_unstarted(out)  # no corpus folder of nothing left behind
        raise


def _generate(pipeline: Pipeline | str | os.PathLike[str], input_path: str | os.PathLike[str],
              out: str | os.PathLike[str], *, stages: Sequence[str] | None, shard_index: int, shard_count: int,
              cache: str | os.PathLike[str] | None, merge: bool, limit: int | None,
              backends: Mapping[str, Any] | None, report: Callable[[str], None] | None) -> dict[str, Any]:
    with CorpusRun(pipeline, input_path, out, cache=cache, backends=backends, limit=limit, report=report) as run:
        info = run.prepare(stages)
        parts = info["input"]["parts"]
        names = list(stages or info["stages"])
        owned = [k for k in range(parts) if k % shard_count == shard_index]
        todo = {k for k in owned if any(not run.folder.has_part(s, k) for s in names)}
        progress = run.folder.progress_file(shard_index, shard_count)
        start, records_done, parts_run = time.monotonic(), 0, 0
        first = info["stages"][0]
        need_input = {k for k in todo if first in names and not run.folder.has_part(first, k)}
        inputs = run.input_parts(need_input)
        buffered: dict[int, list[dict[str, Any]]] = {}

        def input_of(k: int) -> Callable[[], list[dict[str, Any]]]:
            def read() -> list[dict[str, Any]]:
                while k not in buffered:
                    got, records = next(inputs)
                    buffered[got] = records
                return buffered.pop(k)
            return read

        failures = FailureCount()
        for k in sorted(todo):
            stats = run.process_part(k, input_of(k), names)
            parts_run += 1
            records_done += max((s["records"] for s in stats.values()), default=0)
            failures.add(stats)
            elapsed = time.monotonic() - start
            rate = records_done / elapsed if elapsed > 0 else 0.0
            run.report(f"part {k + 1}/{parts} ({', '.join(stats) or 'nothing to do'}): "
                       f"{parts_run}/{len(todo)} parts of worker {shard_index}/{shard_count} done, "
                       f"{rate:.2f} records/s")
            atomic_write_json(progress, {"worker": shard_index, "workers": shard_count, "parts_owned": len(owned),
                                         "parts_left": len(todo) - parts_run, "records": records_done,
                                         "seconds": round(elapsed, 3), "records_per_s": round(rate, 3),
                                         "backends": run.summaries()})
        elapsed = time.monotonic() - start
        complete = run.complete()
        manifest = run.finalize(merge) if complete else None
        return {"out": str(run.folder.root), "records": info["input"]["records"], "parts": parts,
                "parts_run": parts_run, "records_per_s": records_done / elapsed if elapsed > 0 and records_done else 0.0,
                "complete": complete, "manifest": manifest, "backends": run.summaries(),
                "records_run": records_done, **failures.as_dict()}


def _names(paths: Sequence[Path], root: Path, limit: int = 4) -> str:
    shown = ", ".join(str(p.relative_to(root)) for p in paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def _check_part(folder: CorpusFolder, stage: str, k: int, run: dict[str, Any], models: set[str],
                ids: list[str] | None) -> list[str]:
    """Part ``k`` of ``stage`` is one of this run's: the records its place in the input holds
    (``records_per_part``), answered by the run's models, the ids of the stage before; its ids."""
    path = folder.part(stage, k)
    records = folder.read_part(stage, k)
    size, total = run["records_per_part"], run["input"]["records"]
    expected = min(size, total - k * size)
    if len(records) != expected:
        raise DataFormatError(path, f"holds {len(records)} records; part {k} of this run ({total} records, "
                                    f"{size} per part: {folder.run_file}) holds {expected}: a part of another run; "
                                    "remove it and run its stage again")
    for line, record in enumerate(records, start=1):
        by = record.get("generated_by") if isinstance(record, dict) else None
        for what, model in (by.items() if isinstance(by, dict) else ()):
            if model not in models:
                raise DataFormatError(path, f"{what} was generated by {model!r}, which no role of this run serves "
                                            f"({', '.join(sorted(models))}): a part of another run; remove it and "
                                            "run its stage again", record=line, field="generated_by")
    got = [str(r.get("id")) for r in records]
    if ids is not None and got != ids:
        raise DataFormatError(path, f"holds the records {got[:3]}..., but part {k} of the stage before holds "
                                    f"{ids[:3]}...: a part of another run; remove it and run its stage again",
                              field="id")
    return got


def merge_parts(pipeline: Pipeline | str | os.PathLike[str], out: str | os.PathLike[str], *,
                input_path: str | os.PathLike[str] | None = None, merge: bool = True) -> dict[str, Any]:
    """``vlr generate --merge-only``: write ``corpus.jsonl`` (unless ``merge=False``) and
    ``manifest.json`` from the parts already in ``out``, asking no model.

    Refused, with nothing written: a folder without ``run.json``; a ``pipeline`` (after its
    overrides) or ``input_path`` other than the run's; a missing part (every one named, up to a
    few); a part that is not the run's (another part size, a model no role of the run serves,
    other records than the stage before). Returns what :func:`generate_corpus` returns."""
    pipeline = pipeline if isinstance(pipeline, Pipeline) else load_pipeline(pipeline)
    folder = CorpusFolder(out)
    if not folder.run_file.is_file():
        raise UsageError("--merge-only", f"nothing to merge in {out}: {folder.run_file} does not exist (no "
                                         "`vlr generate` run wrote parts there)")
    try:
        run = folder.read_run()
        fingerprint, parts = run["pipeline"]["fingerprint"], int(run["input"]["parts"])
        if run.get("format") != _RUN_FORMAT:
            raise ValueError(f"not a {_RUN_FORMAT} file")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataFormatError(folder.run_file, f"cannot read the run of {out}: {e}") from None
    if fingerprint != pipeline.fingerprint():
        now = pipeline.fingerprint()
        raise UsageError("PIPELINE", f"{pipeline.name} (with --set) is not the pipeline that wrote the parts in {out} "
                                     f"(fingerprint {fingerprint:.12} in {folder.run_file}, {now:.12} now): give "
                                     "the pipeline and --set of that run (prompts, models, sampling, seed, part size)")
    if input_path is not None and _file_sha256(input_path) != run["input"].get("sha256"):
        raise UsageError("--input", f"{input_path} is not the input the parts in {out} were generated from "
                                    f"(SHA-256 {run['input'].get('sha256')!s:.12} in {folder.run_file})")
    stages = [s.name for s in pipeline.stages]
    missing = [folder.part(s, k) for s in stages for k in folder.missing_parts(s, parts)]
    if missing:
        raise UsageError("--merge-only", f"{len(missing)} of {parts * len(stages)} parts are missing from {out}: "
                                         f"{_names(missing, folder.root)}; run the command without --merge-only "
                                         "(or the shards that write them) first")
    models = {spec["model"] for spec in pipeline.roles.values()}
    for k in range(parts):
        ids = None
        for stage in stages:
            ids = _check_part(folder, stage, k, run, models, ids)
    manifest = folder.finalize(run, stages, merge=merge)
    return {"out": str(folder.root), "records": run["input"]["records"], "parts": parts, "parts_run": 0,
            "records_per_s": 0.0, "complete": True, "manifest": manifest, "backends": {}, "records_run": 0,
            "failed_records": 0, "first_failure": None}
