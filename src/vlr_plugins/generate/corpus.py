"""A generated corpus on disk: one folder of JSON Lines parts per stage, a manifest, the
merged corpus. Each part is written once, whole, by an atomic rename.

::

    OUT/
      run.json                     what produced the folder: pipeline fingerprint, input hash, part size
      pipeline.yaml                the pipeline as run (after --set), for people
      stages/texts/part-000000.jsonl   input records 0..P-1 after stage "texts"
      stages/texts/part-000001.jsonl   records P..2P-1 ...
      stages/score-1/part-000000.jsonl
      progress/worker-00000-of-00001.json   records done, records/s, calls, failures
      corpus.jsonl                 the last stage's parts in order (once all are there)
      manifest.json                every stage's parts, records and SHA-256; the corpus's

Part ``k`` of every stage holds input records ``k*P .. (k+1)*P - 1`` (``P`` =
``records_per_part``), so which worker wrote it (a shard of a job array, a Ray actor)
does not change its bytes: records are written with a fixed key order, no timestamps.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from vlr_plugins._io import atomic_open, atomic_write_json
from vlr_plugins.data._text_files import json_lines
from vlr_plugins.errors import DataFormatError

__all__ = ["CORPUS_FORMAT", "CorpusFolder", "ordered_record"]

CORPUS_FORMAT = "vlr-generate-corpus"
_VERSION = 1
_CHANGED_PART = "; a part is written whole, so the file was changed after the run"


def ordered_record(record: dict[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """``record`` with ``fields`` first, in that order, then its other keys sorted."""
    out = {k: record[k] for k in fields if k in record}
    out.update((k, record[k]) for k in sorted(record) if k not in out)
    return out


class CorpusFolder:
    """The files of one output folder (layout in the module docstring)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    # ---------------------------------------------------------------- paths
    @property
    def run_file(self) -> Path:
        return self.root / "run.json"

    @property
    def manifest_file(self) -> Path:
        return self.root / "manifest.json"

    @property
    def corpus_file(self) -> Path:
        return self.root / "corpus.jsonl"

    def stage_dir(self, stage: str) -> Path:
        return self.root / "stages" / stage

    def part(self, stage: str, k: int) -> Path:
        return self.stage_dir(stage) / f"part-{k:06d}.jsonl"

    def progress_file(self, shard_index: int, shard_count: int) -> Path:
        return self.root / "progress" / f"worker-{shard_index:05d}-of-{shard_count:05d}.json"

    # ---------------------------------------------------------------- parts
    def has_part(self, stage: str, k: int) -> bool:
        return self.part(stage, k).is_file()

    def write_part(self, stage: str, k: int, records: Iterable[dict[str, Any]], fields: Sequence[str]) -> Path:
        """Write part ``k`` of ``stage`` whole, or not at all (temporary file, fsync, rename)."""
        path = self.part(stage, k)
        with atomic_open(path) as f:
            for r in records:
                f.write(json.dumps(ordered_record(r, fields), ensure_ascii=False) + "\n")
        return path

    def read_part(self, stage: str, k: int) -> list[dict[str, Any]]:
        path = self.part(stage, k)
        return [record for _, record in json_lines(path, skip_blank=False, note=_CHANGED_PART)]

    def missing_parts(self, stage: str, count: int) -> list[int]:
        return [k for k in range(count) if not self.has_part(stage, k)]

    # ---------------------------------------------------------------- the whole corpus
    def _hash_parts(self, stage: str, count: int) -> tuple[str, int]:
        digest, records = hashlib.sha256(), 0
        for k in range(count):
            with open(self.part(stage, k), "rb") as f:
                for line in f:
                    digest.update(line)
                    records += 1
        return digest.hexdigest(), records

    def iter_records(self, stage: str, count: int) -> Iterator[dict[str, Any]]:
        for k in range(count):
            yield from self.read_part(stage, k)

    def finalize(self, run: dict[str, Any], stages: Sequence[str], merge: bool = True) -> dict[str, Any]:
        """Once every part of every stage is there: ``corpus.jsonl`` (the last stage's parts,
        concatenated; skipped with ``merge=False``) and ``manifest.json``. The bytes of both
        depend only on the parts, so two workers finishing together write the same files."""
        count = run["input"]["parts"]
        last = stages[-1]
        manifest: dict[str, Any] = {"format": CORPUS_FORMAT, "version": _VERSION, "pipeline": run["pipeline"],
                                    "input": run["input"], "records_per_part": run["records_per_part"],
                                    "stages": {}}
        for stage in stages:
            sha, records = self._hash_parts(stage, count)
            manifest["stages"][stage] = {"folder": f"stages/{stage}", "parts": count, "records": records,
                                         "sha256": sha}
        seen: set[str] = set()
        failures: dict[str, int] = {}
        for r in self.iter_records(last, count):
            if r["id"] in seen:
                raise DataFormatError(self.stage_dir(last), f"id {r['id']!r} appears twice; every record is "
                                                            "written once, so the parts were changed", field="id")
            seen.add(r["id"])
            for f in r.get("failures") or (r.get("meta") or {}).get("failures") or []:
                key = f"{f['stage']}/{f['prompt']}"
                failures[key] = failures.get(key, 0) + 1
        manifest["records"] = len(seen)
        manifest["failures"] = dict(sorted(failures.items()))
        if merge:
            with atomic_open(self.corpus_file, "wb") as out:
                for k in range(count):
                    with open(self.part(last, k), "rb") as f:
                        for line in f:
                            out.write(line)
            manifest["corpus"] = {"file": self.corpus_file.name, "records": len(seen),
                                  "sha256": manifest["stages"][last]["sha256"]}
        else:
            manifest["corpus"] = {"folder": f"stages/{last}", "records": len(seen),
                                  "sha256": manifest["stages"][last]["sha256"]}
        atomic_write_json(self.manifest_file, manifest)
        return manifest

    def read_run(self) -> dict[str, Any] | None:
        if not self.run_file.is_file():
            return None
        with open(self.run_file, encoding="utf-8") as f:
            return json.load(f)

    def write_run(self, run: dict[str, Any]) -> None:
        atomic_write_json(self.run_file, run)
