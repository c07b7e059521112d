"""One embedding store written by several processes, each its own part, then merged.

The parts of ``stores/x`` live in a work folder beside it::

    stores/.x.shards/
        part-00000-of-00002/                   shard 0's finished part: an EmbeddingStore
        .part-00001-of-00002.partial/          shard 1's part, unfinished (a ResumableEmbeddingStoreWriter's
                                               work folder: kill -9 safe, finished by --resume)
        part-00001-of-00002.failures.jsonl     the videos shard 1 could not decode (if any)
        merging.json                           the merge claim (who merges, since when)

Each part's ``meta`` is the store's own plus ``"shard"``: its index, the shard count, its
records ``[start, stop)`` of the input, the number of input items and the SHA-256 of their
ids in order, and the ``layout`` the merged store is written in (that of a single-process
run). :func:`merge_parts` checks every part against the others (any other setting is
refused, naming the shard and the setting), that every part is there and holds its whole
range (rows plus listed failures), then writes ``stores/x`` with the single-process writer,
row after row in shard order, and removes the work folder: the same ``index.json`` and
safetensors bytes a single process writes from the same rows.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlr_plugins._io import delete_dir
from vlr_plugins._shards import parts_by_count
from vlr_plugins.data.embedding_store import EmbeddingStore, EmbeddingStoreWriter
from vlr_plugins.data.resumable_store import (
    ResumableEmbeddingStoreWriter,
    _named,
    read_store_progress,
    work_dir_of,
)
from vlr_plugins.errors import DataFormatError, UsageError

__all__ = ["SHARD_KEY", "MergeResult", "Parts", "inputs_digest", "parts_dir_of"]

SHARD_KEY = "shard"  # the entry of a part's meta that says which shard it is
_PART = re.compile(r"^\.?part-(\d{5,})-of-(\d{5,})(\.partial|\.failures\.jsonl)?$")
_READ_ROWS = 65_536


def parts_dir_of(out_dir: str | os.PathLike[str]) -> Path:
    """``stores/x`` -> ``stores/.x.shards``: where the shards of ``stores/x`` write their parts."""
    out = _named(out_dir)
    return out.with_name(f".{out.name}.shards")


def inputs_digest(ids: Sequence[str]) -> str:
    """SHA-256 of the input ids in order: shards of one run were given the same input."""
    sha = hashlib.sha256()
    for i in ids:
        sha.update(i.encode("utf-8") + b"\0")
    return sha.hexdigest()


def _read_failures(path: Path) -> list[str]:
    if not path.is_file():
        return []
    lines = [line for line in path.read_text("utf-8").splitlines() if line.strip()]
    try:
        return [str(json.loads(line)["id"]) for line in lines]
    except (ValueError, KeyError, TypeError) as e:
        raise DataFormatError(path, f"cannot read the failures of this shard ({e}); delete it and rerun the shard "
                                    "with --resume") from None


@dataclass(frozen=True)
class MergeResult:
    out: Path
    rows: int
    failures: int


@dataclass
class Parts:
    """The parts of the store ``out``, ``count`` of them (None: from the names found)."""

    out: Path
    count: int | None = None
    options: Mapping[str, str] | None = None  # meta key -> the option that sets it, for messages

    def __post_init__(self) -> None:
        self.out = _named(self.out)
        self.dir = parts_dir_of(self.out)

    def part(self, index: int, count: int | None = None) -> Path:
        return self.dir / f"part-{index:05d}-of-{(count or self.count):05d}"

    def failures(self, index: int, count: int | None = None) -> Path:
        return self.part(index, count).with_name(self.part(index, count).name + ".failures.jsonl")

    def counts_found(self) -> dict[int, list[str]]:
        """Shard count -> the names of the parts of that count in the work folder."""
        return parts_by_count(self.dir, _PART)

    def settings(self, index: int) -> dict[str, Any] | None:
        """Part ``index``'s dim, dtype and meta (finished or not), or None when it has none yet.

        Another shard may finish its part while it is read here (its work folder moved into place
        between listing a file and opening it, as a rank's check meets a faster rank's finish under
        torchrun): a read that fails where the work folder is gone afterwards is read again, from
        the finished part; a failure while the work folder is still there stands (a damaged part)."""
        part = self.part(index)
        try:
            progress = read_store_progress(part)
        except (DataFormatError, OSError):
            if work_dir_of(part).exists():
                raise
            progress = read_store_progress(part)
        if progress is None:
            return None
        return {"dim": progress.dim, "dtype": progress.dtype, "meta": progress.meta, "rows": len(progress.ids),
                "finished": progress.finished}

    def _option(self, key: str) -> str:
        return (self.options or {}).get(key, key)

    def differences(self, a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
        """``(setting, a's, b's)`` for every setting two parts (or a part and a run) differ in;
        the shard's own index and range are not settings."""
        out = [(k, a[k], b[k]) for k in ("dim", "dtype") if a[k] != b[k]]
        ma, mb = dict(a["meta"]), dict(b["meta"])
        sa, sb = ma.pop(SHARD_KEY, {}) or {}, mb.pop(SHARD_KEY, {}) or {}
        for key in sorted(set(ma) | set(mb), key=str):
            if ma.get(key) != mb.get(key):
                out.append((key, ma.get(key), mb.get(key)))
        for key in sorted((set(sa) | set(sb)) - {"index", "start", "stop"}, key=str):
            if sa.get(key) != sb.get(key):
                out.append((f"{SHARD_KEY}.{key}", sa.get(key), sb.get(key)))
        return out

    def check_against(self, index: int, wanted: dict[str, Any]) -> None:
        """Refuse, naming the shard and the setting, when a part already written (another
        shard's, or an earlier run of this one) has other settings than ``wanted``."""
        for name in sorted(n for names in self.counts_found().values() for n in names):
            m = _PART.match(name)
            if m[3] == ".failures.jsonl":
                continue
            other, count = int(m[1]), int(m[2])
            if count != wanted["meta"][SHARD_KEY]["count"]:
                raise UsageError("--shard-count", f"{count} for the parts already in {self.dir} ({name}), "
                                                  f"{wanted['meta'][SHARD_KEY]['count']} now; use the same "
                                                  f"--shard-count, or remove {self.dir} to start over")
            stored = self.settings(other)
            if stored is None:
                continue
            diffs = self.differences(stored, {**wanted, "dim": stored["dim"] if wanted["dim"] is None
                                              else wanted["dim"]})
            if diffs:
                key, theirs, ours = diffs[0]
                who = "an earlier run of this shard" if other == index else f"shard {other}"
                raise UsageError(self._option(key), f"shard {index}: {who} ({self.part(other)}) was written with "
                                                    f"{key} {theirs!r}, this run gives {ours!r}; use the same "
                                                    f"settings, or remove {self.dir} to start over")

    def missing(self, count: int) -> list[int]:
        """The shards whose part is not finished."""
        return [i for i in range(count) if not (self.part(i, count) / "index.json").is_file()
                or work_dir_of(self.part(i, count)).exists()]

    def merge(self, count: int, *, align_check: Any = None, check_only: bool = False) -> MergeResult | None:
        """Check every part and write ``out`` from them (see the module docstring); the work
        folder is removed once ``out`` is in place. ``align_check(items, index, count, shard
        meta) -> (start, stop)`` recomputes each shard's range. ``check_only``: refuse what
        would be refused, read only, and return None."""
        missing = self.missing(count)
        if missing:
            i = missing[0]
            unfinished = work_dir_of(self.part(i, count))
            state = (f"{unfinished} holds its unfinished rows: rerun --shard-index {i} --shard-count {count} "
                     "--resume" if unfinished.exists() else f"{self.part(i, count)} does not exist: run "
                     f"--shard-index {i} --shard-count {count}")
            more = f" (and shard{'s' if len(missing) > 2 else ''} {', '.join(map(str, missing[1:]))})" \
                if len(missing) > 1 else ""
            raise UsageError("--merge-only", f"shard {i} of {count} is not finished{more}: {state}; nothing merged")
        stores = [EmbeddingStore(self.part(i, count)) for i in range(count)]
        settings = [{"dim": s.dim, "dtype": str(s.dtype).removeprefix("torch."), "meta": s.meta} for s in stores]
        first = settings[0]
        items = first["meta"].get(SHARD_KEY, {}).get("items")
        seen: dict[str, int] = {}
        failures: list[list[str]] = []
        for i, (store, s) in enumerate(zip(stores, settings)):
            shard = s["meta"].get(SHARD_KEY)
            if not isinstance(shard, dict) or shard.get("index") != i or shard.get("count") != count:
                raise DataFormatError(self.part(i, count) / "index.json", f"is not the part of shard {i} of {count} "
                                      f"(its meta {SHARD_KEY!r} is {shard!r}); rerun --shard-index {i} --overwrite",
                                      field=f"meta.{SHARD_KEY}")
            diffs = self.differences(first, s)
            if diffs:
                key, theirs, ours = diffs[0]
                raise UsageError(self._option(key), f"shard {i} ({self.part(i, count)}) was written with {key} "
                                                    f"{ours!r}, shard 0 with {theirs!r}: the parts are of different "
                                                    f"runs; rerun shard {i} (or shard 0) with the same settings and "
                                                    "--overwrite; nothing merged")
            start, stop = align_check(items, i, count, shard) if align_check else (shard["start"], shard["stop"])
            failed = _read_failures(self.failures(i, count))
            if (shard.get("start"), shard.get("stop")) != (start, stop) or len(store) + len(failed) != stop - start:
                raise DataFormatError(self.part(i, count), f"shard {i} of {count} should hold items {start}..{stop - 1} "
                                      f"({stop - start}), it holds {len(store)} rows and lists {len(failed)} failures; "
                                      f"rerun --shard-index {i} --overwrite; nothing merged")
            for row_id in store.ids:
                if row_id in seen:
                    raise DataFormatError(self.part(i, count), f"id {row_id!r} is in shard {seen[row_id]} and shard "
                                                               f"{i}; nothing merged")
                seen[row_id] = i
            failures.append(failed)
        if check_only:
            for store in stores:
                store.close()
            return None
        meta = {k: v for k, v in first["meta"].items() if k != SHARD_KEY}
        layout = first["meta"][SHARD_KEY].get("layout", {})
        self._write(stores, meta, first["dim"], stores[0].dtype, layout)
        lines = [line for i in range(count) if self.failures(i, count).is_file()
                 for line in self.failures(i, count).read_text("utf-8").splitlines(keepends=True) if line.strip()]
        failures_out = self.out.with_name(f"{self.out.name}.failures.jsonl")
        if lines:
            from vlr_plugins._io import atomic_write_text

            atomic_write_text(failures_out, "".join(lines))
        elif layout.get("writer") == "resumable":
            failures_out.unlink(missing_ok=True)  # as a single-process video run that finishes without failures
        delete_dir(self.dir, ignore_errors=True)  # all or nothing, even if killed
        return MergeResult(self.out, len(seen), len(lines))

    def _write(self, stores: list[EmbeddingStore], meta: dict[str, Any], dim: int, dtype: Any,
               layout: dict[str, Any]) -> None:
        if layout.get("writer") == "resumable":
            writer: Any = ResumableEmbeddingStoreWriter(self.out, dim, dtype=dtype, meta=meta, overwrite=True,
                                                        flush_rows=int(layout.get("flush_rows", 256)),
                                                        flush_seconds=math.inf)
        else:
            writer = EmbeddingStoreWriter(self.out, dim, dtype=dtype, meta=meta, overwrite=True,
                                          shard_size=int(layout.get("shard_size", 100_000)))
        try:
            for store in stores:
                ids = list(store.ids)
                for start in range(0, len(ids), _READ_ROWS):
                    chunk = ids[start : start + _READ_ROWS]
                    writer.add(chunk, store.get(chunk).to(dtype))
                store.close()
            writer.close()
        except BaseException:
            (writer.discard if isinstance(writer, ResumableEmbeddingStoreWriter) else writer.abort)()
            raise
