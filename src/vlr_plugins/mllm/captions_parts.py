"""The parts of a sharded ``vlr caption`` run, and their merge into one captions file.

The parts of ``caps.jsonl`` live in a work folder beside it::

    .caps.jsonl.shards/
        part-00000-of-00002.jsonl                  shard 0's captions: a CaptionsFile (kill -9 safe)
        part-00000-of-00002.jsonl.settings.json    its settings record, plus "shard"
        part-00000-of-00002.jsonl.failures.jsonl   the videos shard 0 could not decode (if any)
        merging.json                               the merge claim (vlr_plugins._merge_claim)

A part's ``"shard"`` record: its index, the count, its videos ``[start, stop)``, the number
of input videos and the SHA-256 of their ids in order, ``--batch-size``. A part is finished
when its captions and listed failures together are its whole range (a partial last line: not
finished). :meth:`CaptionParts.merge` checks every part against shard 0 (any other setting is
refused, naming the shard and the setting), that each is finished and holds the range
:func:`~vlr_plugins._shards.shard_range` gives it, then writes ``caps.jsonl`` (the parts'
lines in shard order), ``caps.jsonl.settings.json`` (the record without ``"shard"``) and the
failures: byte for byte what one process writes.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vlr_plugins._shards import parts_by_count, shard_range
from vlr_plugins.errors import DataFormatError, UsageError
from vlr_plugins.mllm.captions_file import failures_path_of, settings_path_of

__all__ = ["SHARD_KEY", "CaptionParts", "caption_inputs_digest", "parts_dir_of"]

SHARD_KEY = "shard"
_PART = re.compile(r"^part-(\d{5,})-of-(\d{5,})\.jsonl(\.settings\.json|\.failures\.jsonl)?$")
_NOT_SETTINGS = {f"{SHARD_KEY}.{k}" for k in ("index", "start", "stop")}  # a shard's own place, not a setting
#: the setting a part records -> the option that sets it (named when parts disagree)
_OPTIONS = {"model": "--model", "model_dtype": "--model-dtype", "backend": "--backend", "name": "--settings",
            "prompt": "--prompt", "video_input": "--settings", "generation": "--settings",
            "shard.count": "--shard-count", "shard.batch_size": "--batch-size",
            "shard.items": "--videos / --annotations / --limit", "shard.inputs": "--videos / --annotations / --limit"}


def parts_dir_of(out: str | os.PathLike[str]) -> Path:
    """``runs/caps.jsonl`` -> ``runs/.caps.jsonl.shards``: where its shards write their parts."""
    out = Path(out)
    return out.with_name(f".{out.name}.shards")


def caption_inputs_digest(ids: Sequence[str]) -> str:
    from vlr_plugins.data.store_parts import inputs_digest

    return inputs_digest(ids)


def _option(key: str) -> str:
    return _OPTIONS.get(key, _OPTIONS.get(key.split(".", 1)[0], "--settings"))


def _settings_differences(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any, Any]]:
    """``(setting, a's, b's)`` for every setting two records differ in (a shard's place is none)."""
    out = []
    for key in sorted(set(a) | set(b), key=str):
        x, y = a.get(key), b.get(key)
        if isinstance(x, Mapping) and isinstance(y, Mapping):
            out += _settings_differences(x, y, f"{prefix}{key}.")
        elif x != y and f"{prefix}{key}" not in _NOT_SETTINGS:
            out.append((f"{prefix}{key}", x, y))
    return out


def _lines(path: Path) -> list[bytes]:
    """The complete lines of ``path`` (read only; a partial last line is not counted)."""
    if not path.is_file():
        return []
    data = path.read_bytes()
    return data[: data.rfind(b"\n") + 1].splitlines(keepends=True)


def _ids(path: Path) -> list[str]:
    ids = []
    for n, line in enumerate(_lines(path), 1):
        try:
            ids.append(str(json.loads(line)["id"]))
        except (ValueError, KeyError, TypeError):
            raise DataFormatError(path, "expected {\"id\": ..., ...}", record=n) from None
    return ids


class CaptionParts:
    """The parts of the captions file ``out``, ``count`` of them (None: from the names found)."""

    def __init__(self, out: str | os.PathLike[str], count: int | None = None) -> None:
        self.out, self.count = Path(out), count
        self.dir = parts_dir_of(self.out)

    def part(self, index: int, count: int | None = None) -> Path:
        return self.dir / f"part-{index:05d}-of-{(count or self.count):05d}.jsonl"

    def files(self, index: int, count: int | None = None) -> list[Path]:
        part = self.part(index, count)
        return [part, settings_path_of(part), failures_path_of(part)]

    def counts_found(self) -> dict[int, list[str]]:
        """Shard count -> the names of the part files of that count in the work folder."""
        return parts_by_count(self.dir, _PART)

    def record(self, index: int, count: int | None = None) -> dict[str, Any] | None:
        path = settings_path_of(self.part(index, count))
        if not path.is_file():
            return None
        try:
            record = json.loads(path.read_text("utf-8"))
        except ValueError as e:
            raise DataFormatError(path, f"cannot read this shard's settings record ({e}); rerun the shard with "
                                        "--overwrite") from None
        shard = record.get(SHARD_KEY) if isinstance(record, dict) else None
        if not isinstance(shard, dict) or shard.get("index") != index or shard.get("count") != (count or self.count):
            raise DataFormatError(path, f"is not the settings record of shard {index} of {count or self.count}; "
                                        f"rerun --shard-index {index} --overwrite", field=SHARD_KEY)
        return record

    def state(self, index: int, count: int | None = None) -> str | None:
        """None when part ``index`` is finished, else what is to be done about it."""
        part, c = self.part(index, count), count or self.count
        record = self.record(index, c)
        if record is None:
            return f"{part} does not exist: run --shard-index {index} --shard-count {c}"
        shard = record[SHARD_KEY]
        captions, failed = _ids(part), _ids(failures_path_of(part))
        size = int(shard["stop"]) - int(shard["start"])
        partial = part.is_file() and part.stat().st_size != sum(map(len, _lines(part)))
        if len(captions) + len(failed) != size or set(captions) & set(failed) or partial:
            return (f"{part} holds {len(captions)} of its {size} captions ({len(failed)} videos listed as failed): "
                    f"rerun --shard-index {index} --shard-count {c} --resume")
        return None

    def missing(self, count: int) -> list[tuple[int, str]]:
        return [(i, why) for i in range(count) if (why := self.state(i, count)) is not None]

    def check_against(self, index: int, wanted: Mapping[str, Any]) -> None:
        """Refuse, naming the shard and the setting, when a part already written (another
        shard's, or an earlier run of this one) has other settings than ``wanted``."""
        count = wanted[SHARD_KEY]["count"]
        for found, names in self.counts_found().items():
            if found != count:
                raise UsageError("--shard-count", f"{count} now, but {self.dir} holds parts of a run with {found} "
                                                  f"shards ({names[0]}); use the same --shard-count, or remove "
                                                  f"{self.dir} to start over")
        for other in range(count):
            stored = self.record(other, count)
            diffs = [] if stored is None else _settings_differences(stored, wanted)
            if diffs:
                key, theirs, ours = diffs[0]
                who = "an earlier run of this shard" if other == index else f"shard {other}"
                raise UsageError(_option(key), f"shard {index}: {who} ({self.part(other, count)}) was written with "
                                               f"{key} {theirs!r}, this run gives {ours!r}; use the same settings, "
                                               f"or remove {self.dir} to start over")

    def merge(self, count: int, *, check_only: bool = False) -> tuple[int, int] | None:
        """Check every part and write ``out`` from them; ``(captions, failures)``, or None
        with ``check_only`` (refuse what would be refused, write nothing)."""
        missing = self.missing(count)
        if missing:
            (i, why), rest = missing[0], [str(j) for j, _ in missing[1:]]
            more = f" (and shard{'s' if len(rest) > 1 else ''} {', '.join(rest)})" if rest else ""
            raise UsageError("--merge-only", f"shard {i} of {count} is not finished{more}: {why}; nothing merged")
        records = [self.record(i, count) for i in range(count)]
        first, seen = records[0], {}
        for i, record in enumerate(records):
            diffs = _settings_differences(first, record)
            if diffs:
                key, theirs, ours = diffs[0]
                raise UsageError(_option(key), f"shard {i} ({self.part(i, count)}) was written with {key} {ours!r}, "
                                               f"shard 0 with {theirs!r}: the parts are of different runs; rerun "
                                               f"shard {i} (or shard 0) with the same settings and --overwrite; "
                                               "nothing merged")
            shard = record[SHARD_KEY]
            # parts written before length-sorted windows were aligned on batches
            start, stop = shard_range(int(shard["items"]), i, count, align=int(shard.get("align", shard["batch_size"])))
            if (shard["start"], shard["stop"]) != (start, stop):
                raise DataFormatError(settings_path_of(self.part(i, count)), f"shard {i} of {count} should take "
                                      f"videos {start}..{stop - 1}, its record says {shard['start']}.."
                                      f"{shard['stop'] - 1}; rerun --shard-index {i} --overwrite; nothing merged",
                                      field=SHARD_KEY)
            for vid in _ids(self.part(i, count)) + _ids(failures_path_of(self.part(i, count))):
                if vid in seen:
                    raise DataFormatError(self.part(i, count), f"video {vid!r} is in shard {seen[vid]} and shard {i}; "
                                                               "nothing merged")
                seen[vid] = i
        if check_only:
            return None
        from vlr_plugins._io import atomic_open, atomic_write_json, delete_dir

        failed = [line for i in range(count) for line in _lines(failures_path_of(self.part(i, count)))]
        if failed:
            with atomic_open(failures_path_of(self.out), "wb") as f:
                f.writelines(failed)
        else:
            failures_path_of(self.out).unlink(missing_ok=True)
        atomic_write_json(settings_path_of(self.out), {k: v for k, v in first.items() if k != SHARD_KEY})
        rows = 0
        with atomic_open(self.out, "wb") as f:  # last: a kill before this leaves the parts, and no captions file
            for i in range(count):
                lines = _lines(self.part(i, count))
                f.writelines(lines)
                rows += len(lines)
        delete_dir(self.dir, ignore_errors=True)  # all or nothing, even if killed
        return rows, len(failed)

