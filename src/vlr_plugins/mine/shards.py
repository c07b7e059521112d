"""``vlr mine --shard-index I --shard-count N``: one corpus mined by several processes (a SLURM
job array), each once, surviving a kill (docs/eval.md, "vlr mine").

Shard ``I`` mines the queries of records ``[n*I//N, n*(I+1)//N)`` (a contiguous range, so the
merged corpus keeps the input order) against the whole gallery (embedded by every shard itself,
or, with ``--gallery-store``, read from the store ``--embed-gallery`` wrote once for the whole
job: mine/gallery_store.py), and writes its part into a work folder beside ``--out``::

    data/.mined.jsonl.parts/        the work folder of data/mined.jsonl
        manifest.json               the input (size, mtime, SHA-256) and every setting of the run
        part-00003-of-00008.json    shard 3's records: their mined gallery indices, best first
        merging.json                the merge claim: host, pid, start time (vlr_plugins/_merge_claim.py)
    data/.mined.jsonl.run.json      after the merge: the manifest kept, and --out's size and SHA-256

Every file is written to a temporary name and renamed, so it is there whole or not at all. A
rerun of a shard whose part is there does nothing; a rerun with other settings is refused,
naming the setting. Once every part is there, the shard that finishes last (or ``--merge-only``)
claims the merge, writes ``--out`` atomically in the corpus' format, then the run record, and
removes the work folder. A task that runs again after that (a SLURM requeue) finds ``--out``
and the run record of the same input and settings, and does nothing; an ``--out`` of anything
else is refused.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlr_plugins._io import atomic_write_json, delete_dir
from vlr_plugins.errors import DataFormatError, UsageError
from vlr_plugins._merge_claim import Claim, take_claim
from vlr_plugins._shards import check_shard_options as _check_pair
from vlr_plugins._shards import shard_range

__all__ = ["ShardRun", "check_shard_options", "finished_run", "open_shards", "run_record_of", "shard_range",
           "work_dir_of"]

_FORMAT = "vlr-mine-parts"
_VERSION = 1
_RUN_FORMAT = "vlr-mine-run"

#: manifest key -> the option that sets it (named when a rerun differs)
_SETTINGS = {
    "format": "FORMAT", "model": "--model", "tokenizer": "--tokenizer", "max_tokens": "--max-tokens",
    "model_dtype": "--model-dtype", "num_negatives": "--num-negatives", "range_min": "--range-min",
    "range_max": "--range-max", "margin": "--margin", "query": "--query", "pool": "--pool",
    "keep_existing": "--keep-existing", "image_embeddings": "--image-embeddings",
    "video_embeddings": "--video-embeddings", "shard_count": "--shard-count",
}


def work_dir_of(out: str | os.PathLike[str]) -> Path:
    """``data/mined.jsonl`` -> ``data/.mined.jsonl.parts``."""
    out = Path(os.path.abspath(out))
    return out.with_name(f".{out.name}.parts")


def run_record_of(out: str | os.PathLike[str]) -> Path:
    """``data/mined.jsonl`` -> ``data/.mined.jsonl.run.json`` (written by a sharded run's merge)."""
    out = Path(os.path.abspath(out))
    return out.with_name(f".{out.name}.run.json")


def is_sharded(args: argparse.Namespace) -> bool:
    return args.shard_count is not None or args.shard_index is not None or args.merge_only


def check_shard_options(args: argparse.Namespace) -> None:
    """The shard options agree with one another (before anything is read)."""
    if args.merge_only:
        if args.shard_index is not None:
            raise UsageError("--shard-index", "--merge-only merges the parts of every shard; drop --shard-index")
        return
    _check_pair(args.shard_index, args.shard_count)




def _file_identity(path: str | os.PathLike[str]) -> dict[str, Any]:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha.hexdigest()}


def _settings(args: argparse.Namespace, shard_count: int) -> dict[str, Any]:
    settings = {key: getattr(args, key, None) for key in _SETTINGS if key != "shard_count"}
    if args.format == "paragraph":  # the defaults written out: a rerun spelling them gives the same run
        settings["query"] = args.query or "caption"
        settings["pool"] = [p.strip() for p in (args.pool or "caption,positives").split(",")]
    elif args.format == "mvc":  # the views as fields: "summary" and "S1,S2,O" are one run
        from vlr_plugins.mine.mvc_corpus import mvc_view

        try:
            query = mvc_view(args.query, option="--query")
            settings["query"] = query if query == "video" else list(query)
            settings["pool"] = list(mvc_view(args.pool, option="--pool",
                                             default="summary" if query == "video" else (args.query or "summary")))
        except ValueError:
            pass  # refused by the task's checks (as given, it matches no run)
    for store in ("image_embeddings", "video_embeddings"):
        if settings[store] is not None:
            settings[store] = os.path.abspath(settings[store])
    settings["shard_count"] = shard_count
    return settings


@dataclass
class ShardRun:
    """The work folder of one sharded run, its manifest checked against this invocation."""

    work: Path
    count: int
    records: int
    manifest: dict[str, Any]
    new: bool = False  # the manifest is written with the first part (a refused run writes nothing)

    def part(self, index: int) -> Path:
        return self.work / f"part-{index:05d}-of-{self.count:05d}.json"

    def range(self, index: int) -> tuple[int, int]:
        return shard_range(self.records, index, self.count)

    def missing(self) -> list[int]:
        return [i for i in range(self.count) if not self.part(i).is_file()]

    def write_part(self, index: int, indices: list[list[int]]) -> None:
        start, stop = self.range(index)
        if len(indices) != stop - start:
            raise ValueError(f"shard {index} holds {stop - start} records, given {len(indices)}")
        if self.new:
            self.work.mkdir(parents=True, exist_ok=True)
            manifest = self.work / "manifest.json"
            if manifest.is_file():  # a shard that started alongside wrote it: the same run?
                _check_same(manifest, self.manifest, self.work)
            else:
                atomic_write_json(manifest, self.manifest)
            self.new = False
        atomic_write_json(self.part(index), {"shard": index, "start": start, "stop": stop, "indices": indices})

    def read_parts(self, gallery: int) -> list[list[int]]:
        """Every record's mined gallery indices, in input order, each part checked."""
        out: list[list[int]] = []
        for i in range(self.count):
            path, (start, stop) = self.part(i), self.range(i)
            try:
                part = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise DataFormatError(path, f"cannot read the part of shard {i}: {e}; delete it and rerun "
                                            f"--shard-index {i}") from None
            rows = part.get("indices") if isinstance(part, dict) else None
            if (part.get("start"), part.get("stop")) != (start, stop) or not isinstance(rows, list) \
                    or len(rows) != stop - start \
                    or not all(isinstance(r, list) and all(type(j) is int and 0 <= j < gallery for j in r)
                               for r in rows):
                raise DataFormatError(path, f"is not the part of shard {i} (records {start}..{stop - 1} as "
                                            f"gallery indices below {gallery}); delete it and rerun "
                                            f"--shard-index {i}", field="indices")
            out.extend(rows)
        return out

    def merged_already(self, out: str | os.PathLike[str]) -> bool:
        """The work folder is gone and ``out``'s run record is this run's: another shard merged
        (and removed the parts) while this one finished."""
        if self.work.is_dir():
            return False
        try:
            record = json.loads(run_record_of(out).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        stored = record.get("manifest") if isinstance(record, dict) else None
        return isinstance(stored, dict) and not _differences(stored, self.manifest)

    def claim_merge(self, *, timeout: float, force: bool) -> tuple[bool, Claim | None]:
        """Whether this process merges, and the claim it took over or found held
        (_merge_claim.py: a stale claim is taken over; ``force``: any but a live one here)."""
        return take_claim(self.work / "merging.json", timeout=timeout, force=force)

    def finish(self, out: str | os.PathLike[str]) -> None:
        """After ``out`` is written: the run record beside it, then the work folder removed."""
        atomic_write_json(run_record_of(out), {"format": _RUN_FORMAT, "version": _VERSION, "manifest": self.manifest,
                                               "output": _file_identity(out)})
        delete_dir(self.work, ignore_errors=True)  # all or nothing, even if killed


def _differences(stored: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    out = []
    if stored.get("records") != wanted["records"] or stored.get("input", {}).get("sha256") != \
            wanted["input"]["sha256"] or stored.get("input", {}).get("size") != wanted["input"]["size"]:
        out.append(f"INPUT: {wanted['input']['path']} is not the file the shards already written mined "
                   f"({stored.get('input', {}).get('size')} bytes, SHA-256 {stored.get('input', {}).get('sha256')})")
    for key, option in _SETTINGS.items():
        if stored.get("settings", {}).get(key) != wanted["settings"][key]:
            out.append(f"{option}: the shards already written were mined with "
                       f"{stored.get('settings', {}).get(key)!r}, this run gives {wanted['settings'][key]!r}")
    return out


def _read_manifest(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DataFormatError(path, f"cannot read the manifest of the shards: {e}; remove {path.parent} to start "
                                    "over") from None


def _check_same(path: Path, wanted: dict[str, Any], work: Path, stored: dict[str, Any] | None = None) -> None:
    stored = _read_manifest(path) if stored is None else stored
    if not isinstance(stored, dict) or stored.get("format") != _FORMAT or stored.get("version") != _VERSION:
        raise DataFormatError(path, f"is not a {_FORMAT} v{_VERSION} manifest; remove {work}")
    diffs = _differences(stored, wanted)
    if diffs:
        option, problem = diffs[0].split(": ", 1)
        raise UsageError(option, f"{problem}; rerun with the same settings, or remove {work} to start over")


def open_shards(args: argparse.Namespace, records: int) -> ShardRun:
    """The work folder of ``--out``: its manifest checked against ``args`` (a different input
    or setting is refused, naming it); a new one is written with the first part."""
    work = work_dir_of(args.out)
    manifest_path = work / "manifest.json"
    if args.merge_only:
        if not manifest_path.is_file():
            raise UsageError("--merge-only", f"no shards of {args.out} to merge: {manifest_path} does not exist")
        stored = _read_manifest(manifest_path)
        if not isinstance(stored, dict):
            _check_same(manifest_path, {}, work, stored)  # refuses it, naming the file
        count = args.shard_count or stored.get("settings", {}).get("shard_count")
    else:
        stored, count = None, args.shard_count
        if manifest_path.is_file():
            stored = _read_manifest(manifest_path)
    wanted = _wanted(args, records, count)
    if stored is not None:
        _check_same(manifest_path, wanted, work, stored)
    return ShardRun(work, count, records, stored if stored is not None else wanted, new=stored is None)


def _wanted(args: argparse.Namespace, records: int | None, count: int | None) -> dict[str, Any]:
    return {"format": _FORMAT, "version": _VERSION, "records": records,
            "input": {"path": os.path.abspath(args.input), **_file_identity(args.input)},
            "settings": _settings(args, count)}


def finished_run(args: argparse.Namespace) -> str | None:
    """A sharded invocation whose ``--out`` exists and no work folder: the message to print when
    this very run (same input and settings, by its run record) wrote ``--out`` and it is unchanged
    since, or None when ``--out`` has no run record; another run's ``--out`` is refused."""
    out, record_path = args.out, run_record_of(args.out)
    if not record_path.is_file():
        return None
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
        stored, written = record["manifest"], record["output"]
        if record.get("format") != _RUN_FORMAT or not isinstance(stored, dict):
            raise ValueError(f"not a {_RUN_FORMAT} record")
        count = stored["settings"]["shard_count"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataFormatError(record_path, f"cannot read the run record of {out}: {e}; pass --overwrite to mine "
                                           "again, or give another --out") from None
    count = (args.shard_count or count) if args.merge_only else args.shard_count
    wanted = _wanted(args, stored.get("records"), count)
    diffs = _differences(stored, wanted)
    if diffs:
        option, problem = diffs[0].split(": ", 1)
        problem = problem.replace("the shards already written were mined with", f"{out} was mined with")
        problem = problem.replace("is not the file the shards already written mined", f"is not the file {out} "
                                                                                        "was mined from")
        raise UsageError("--out", f"{out} exists from another run ({option}: {problem}); pass --overwrite to "
                                  "replace it, or give another --out")
    now = _file_identity(out)
    if (now["size"], now["sha256"]) != (written.get("size"), written.get("sha256")):
        raise UsageError("--out", f"{out} exists and has changed since the sharded run of these settings wrote it "
                                  f"({written.get('size')} bytes then, {now['size']} now); pass --overwrite to mine "
                                  "again, or give another --out")
    who = "--merge-only" if args.merge_only else f"shard {args.shard_index} of {count}"
    return (f"{who}: nothing to do: {out} is already written by this run (all {count} shards merged, the same "
            f"input and settings: {record_path})")
