"""Multi-view-captions (MVC) training samples: one video (or clip) with its caption views."""

from __future__ import annotations

import difflib
import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlr_plugins._io import atomic_open
from vlr_plugins.data._text_files import json_lines
from vlr_plugins.data.sample import _parquet_records, _Record
from vlr_plugins.errors import DataFormatError, _type_name
from vlr_plugins.registry import READERS

__all__ = ["MVCSample", "MVC_TEXT_FIELDS", "MVC_SUMMARY_FIELDS", "MVC_DETAILED_FIELDS", "MVC_SAMPLE_SUFFIXES",
           "mvc_record_kind", "read_mvc_records", "read_mvc_samples", "mvc_sample_from_record", "write_mvc_samples"]

#: The caption fields of an MVC sample (paper sec. 3.1), each one text or null, in this order:
#: ``O`` the original caption; ``S1``, ``S2`` summary captions; ``D1``, ``D2`` raw detailed
#: captions; ``D1*``, ``D2*`` refined detailed captions; ``P1``, ``P2`` semantic positives.
MVC_TEXT_FIELDS: dict[str, str] = {f: "one" for f in ("O", "S1", "S2", "D1", "D2", "D1*", "D2*", "P1", "P2")}
#: The paper's summary-view candidates, c_s ~ {O, S1, S2} (sec. 3.2).
MVC_SUMMARY_FIELDS: tuple[str, ...] = ("O", "S1", "S2")
#: The paper's detailed-view candidates, c_d ~ {D1*, D2*, P1, P2} (sec. 3.2).
MVC_DETAILED_FIELDS: tuple[str, ...] = ("D1*", "D2*", "P1", "P2")
#: The file suffixes :func:`read_mvc_samples` reads.
MVC_SAMPLE_SUFFIXES = (".jsonl", ".json", ".parquet")
_OTHER_KEYS = ("id", "video", "start", "end", "hard_negatives", "meta")
_KNOWN = (*_OTHER_KEYS[:4], *MVC_TEXT_FIELDS, *_OTHER_KEYS[4:])


@dataclass(frozen=True)
class MVCSample:
    """One training video and its captions (MVC paper, sec. 3.1).

    Attributes:
        id: the video's id (unique in the corpus).
        video: the path of the video file.
        captions: ``(field, text)`` pairs of the caption fields it has, in
            :data:`MVC_TEXT_FIELDS` order (a mapping is accepted and converted, so that
            samples stay hashable).
        start, end: for a clip of a longer video, the seconds it spans (``None``: the
            video's start / end).
        hard_negatives: ids of other videos of the same corpus that are hard negatives of
            this one, best first (what ``vlr mine mvc`` writes); ``()`` when none.

    ``texts(field)`` gives a field's text as a 1-tuple, or ``()`` when the sample lacks
    it: what :class:`~vlr_plugins.data.TextView` pools into candidate sets.
    """

    id: str
    video: str
    captions: tuple[tuple[str, str], ...] = ()
    start: float | None = None
    end: float | None = None
    hard_negatives: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.hard_negatives, tuple):
            object.__setattr__(self, "hard_negatives", tuple(self.hard_negatives))
        given = dict(self.captions.items() if isinstance(self.captions, Mapping) else self.captions)
        unknown = [f for f in given if f not in MVC_TEXT_FIELDS]
        if unknown:
            raise ValueError(f"no MVC caption field {unknown[0]!r}; known: {', '.join(MVC_TEXT_FIELDS)}")
        object.__setattr__(self, "captions", tuple((f, given[f]) for f in MVC_TEXT_FIELDS if f in given))

    def texts(self, field: str) -> tuple[str, ...]:
        """The text of ``field`` (a key of :data:`MVC_TEXT_FIELDS`) as a 1-tuple, ``()`` if absent."""
        if field not in MVC_TEXT_FIELDS:
            raise ValueError(f"no text field {field!r}; known: {', '.join(MVC_TEXT_FIELDS)}")
        return tuple(t for f, t in self.captions if f == field)

    @property
    def media(self) -> str:
        """The video path (what a media source loads)."""
        return self.video

    @property
    def window(self) -> tuple[float | None, float | None] | None:
        """``(start, end)`` seconds for :func:`~vlr_plugins.data.video.sample_frames`, or ``None``."""
        return None if self.start is None and self.end is None else (self.start, self.end)


#: what a misspelt key may have meant, by its words (a caption view named in words)
_VIEW_WORDS = {"summary": ("S1", "S2"), "summaries": ("S1", "S2"), "detailed": ("D1*", "D2*"),
               "details": ("D1*", "D2*"), "refined": ("D1*", "D2*"), "raw": ("D1", "D2"),
               "original": ("O",), "caption": ("O",), "positive": ("P1", "P2"), "positives": ("P1", "P2")}


def _meant(key: str) -> list[str]:
    """The known keys a misspelt ``key`` of an MVC record may have meant: a caption view in other
    case or spacing (``s1``, ``D1 *``, ``D1_star``), a view named in words (``summary``), else the
    closest key of its kind (caption views for a short view-like key, the other keys otherwise)."""
    import re

    word = key.strip().lower()
    if word in _VIEW_WORDS:
        return list(_VIEW_WORDS[word])
    squeezed = re.sub(r"[\s_-]*(star|\*)$", "*", re.sub(r"[\s_-]+", "", key.strip())).upper()
    by_upper = {k.upper(): k for k in _KNOWN}
    if squeezed in by_upper:
        return [by_upper[squeezed]]
    if re.fullmatch(r"[A-Za-z]\d*\*?", key.strip()):  # view-like: the closest views
        return difflib.get_close_matches(squeezed, list(MVC_TEXT_FIELDS), n=2, cutoff=0.5)
    others = [k for k in _KNOWN if k not in MVC_TEXT_FIELDS]
    return difflib.get_close_matches(word, others, n=1, cutoff=0.75)


class _MVCRecord(_Record):
    """The paragraph reader's record checks (:class:`~vlr_plugins.data.sample._Record`), plus
    the video's window, the caption fields and no key outside the schema."""

    needs = "every record needs an id, a video and at least one caption"

    def known_keys(self) -> None:
        for key in self.raw:
            if key not in _KNOWN:
                close = _meant(str(key))
                hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
                raise self.error(str(key), f"unknown field{hint}; an MVC record holds {', '.join(_KNOWN)}")

    def seconds(self, key: str) -> float | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise self.error(key, f"expected seconds, a number >= 0 (or null), found {json.dumps(value)}")
        return float(value)

    def negative_ids(self, own: str) -> tuple[str, ...]:
        """``hard_negatives``: a list of video ids (strings or integers, as ``id``), each
        once and none the record's own (that they name videos of the corpus is checked by
        :func:`read_mvc_samples` once every record is read)."""
        value = self.raw.get("hard_negatives")
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.error("hard_negatives", f"expected a list of video ids, found {_type_name(value)}")
        out: list[str] = []
        for i, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, (str, int)) or (isinstance(item, str)
                                                                              and not item.strip()):
                found = "an empty string" if isinstance(item, str) else _type_name(item)
                raise self.error("hard_negatives", f"expected video ids (strings or integers), found {found} "
                                                   f"at index {i}")
            if str(item) == own:
                raise self.error("hard_negatives", f"index {i} is the record's own id {own!r}: a video is not "
                                                   "its own negative")
            if str(item) in out:
                raise self.error("hard_negatives", f"id {str(item)!r} given twice (index {out.index(str(item))} "
                                                   f"and {i})")
            out.append(str(item))
        return tuple(out)

    def sample(self, media_key: str | None = "video",  # type: ignore[override]
               media_root: Path | None = None) -> MVCSample:
        self.known_keys()
        sample_id = self.id()
        if "video" not in self.raw or self.raw["video"] is None:
            raise self.error("video", f"missing; {self.needs}")
        video = self.media("video", media_root or Path("."))
        start, end = self.seconds("start"), self.seconds("end")
        if start is not None and end is not None and not end > start:
            raise self.error("end", f"expected the end after the start ({start:g} s), found {end:g} s")
        captions = {f: t for f in MVC_TEXT_FIELDS if (t := self.one_text(f, required=False)) is not None}
        if not captions:
            raise self.error(None, f"no caption: expected at least one of {', '.join(MVC_TEXT_FIELDS)} "
                                   "as a non-empty string")
        return MVCSample(id=sample_id, video=video, captions=tuple(captions.items()), start=start, end=end,
                         hard_negatives=self.negative_ids(sample_id))


def mvc_sample_from_record(
    raw: Any,
    path: str | os.PathLike[str],
    record: int | None = None,
    *,
    kind: str = "line",
    video_root: str | os.PathLike[str] | None = None,
) -> MVCSample:
    """One :class:`MVCSample` from a raw mapping, under the rules of :func:`read_mvc_samples`;
    errors name ``path``, ``record`` (a ``kind``: line, row...) and the field."""
    if not isinstance(raw, dict):
        raise DataFormatError(path, f"expected a JSON object, found {_type_name(raw)}", record=record,
                              record_kind=kind)
    root = Path(video_root) if video_root is not None else Path(path).parent
    return _MVCRecord(raw, path, record, kind).sample("video", root)


def read_mvc_samples(
    path: str | os.PathLike[str],
    *,
    video_root: str | os.PathLike[str] | None = None,
) -> list[MVCSample]:
    """Read and validate MVC training samples from JSON Lines or Parquet.

    Expects ``.jsonl`` / ``.json`` (JSON Lines: one object per line; blank lines are
    skipped) or ``.parquet`` (one row per video), each record holding

    ===============================  ====================================  ================
    key                              what                                  if missing/null
    ===============================  ====================================  ================
    ``id``                           string or integer, unique             error
    ``video``                        path of the video file                error
    ``start``, ``end``               seconds (>= 0, end > start): a clip   the video's ends
    ``O``                            the original (web) caption            absent
    ``S1``, ``S2``                   summary captions (two MLLMs)          absent
    ``D1``, ``D2``                   raw detailed captions                 absent
    ``D1*``, ``D2*``                 refined detailed captions             absent
    ``P1``, ``P2``                   semantic positive captions            absent
    ``hard_negatives``               ids of other videos of the corpus     none
    ``meta``                         anything (ignored)                    --
    ===============================  ====================================  ================

    Captions are non-empty strings; a record needs at least one. Any other key is an
    error (a misspelt view, ``D1_star``, would otherwise vanish from training), as is a
    value of the wrong type. ``hard_negatives`` (``vlr mine mvc``'s output) lists each id
    once, never the record's own, and only ids of the file's records. Relative video paths
    are taken from ``video_root`` (default: the file's folder). Every record is validated before anything is returned; the first
    problem raises :class:`~vlr_plugins.errors.DataFormatError` naming the file, the line
    (1-based) or Parquet row (0-based), and the field. A repeated id names both places.

    Reference: the supervision set C(v) of the multi-view-captions paper (sec. 3.1):
    ``{S1, S2, D1*, D2*, P1, P2, O}``, plus the raw ``D1``, ``D2`` of its Table 5.

    Relations: the record checks are :func:`~vlr_plugins.data.read_paragraph_samples`'
    (same machinery, another schema); which fields a step draws is the recipe's text views
    (``c_s`` from ``[O, S1, S2]``, ``c_d`` from ``[D1*, D2*, P1, P2]``, docs/mvc.md);
    :func:`write_mvc_samples` writes the JSON Lines form.

    Example::

        >>> samples = read_mvc_samples("internvid_mvc.jsonl", video_root="videos/")  # doctest: +SKIP
        >>> samples[0].texts("S1")  # doctest: +SKIP
        ('A person walks along a rocky path on a coastline.',)
    """
    return [sample for _, _, sample in _read(path, video_root, keep_raw=False)]


def read_mvc_records(
    path: str | os.PathLike[str],
    *,
    video_root: str | os.PathLike[str] | None = None,
) -> list[tuple[int, dict[str, Any], MVCSample]]:
    """:func:`read_mvc_samples` keeping each record as read: ``(line or row, the raw record,
    its sample)``, for a tool that writes the corpus back with every key as it was (``meta``,
    the video paths as written; ``vlr mine mvc``). Errors name a line (JSON Lines) or a row
    (Parquet): :func:`mvc_record_kind`."""
    return _read(path, video_root, keep_raw=True)


def _read(path: str | os.PathLike[str], video_root: str | os.PathLike[str] | None, *, keep_raw: bool
          ) -> list[tuple[int, Any, MVCSample]]:
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        records, kind = json_lines(path), "line"
    elif suffix == ".parquet":
        records, kind = _parquet_records(path, ("id", "video")), "row"
    else:
        raise ValueError(f"cannot read MVC samples from {path}: expected one of {', '.join(MVC_SAMPLE_SUFFIXES)}, "
                         f"found suffix {path.suffix or '(none)'!r}")
    root = Path(video_root) if video_root is not None else path.parent
    out: list[tuple[int, Any, MVCSample]] = []
    first_seen: dict[str, int] = {}
    for record, raw in records:
        sample = mvc_sample_from_record(raw, path, record, kind=kind, video_root=root)
        if sample.id in first_seen:
            raise DataFormatError(path, f"duplicate id {sample.id!r}, first seen on {kind} {first_seen[sample.id]}",
                                  record=record, field="id", record_kind=kind)
        first_seen[sample.id] = record
        out.append((record, raw if keep_raw else None, sample))
    for record, _, sample in out:
        unknown = [i for i in sample.hard_negatives if i not in first_seen]
        if unknown:
            raise DataFormatError(path, f"names video id {unknown[0]!r}, which no record of the file has",
                                  record=record, field="hard_negatives", record_kind=kind)
    return out


def mvc_record_kind(path: str | os.PathLike[str]) -> str:
    """What :func:`read_mvc_records` counts records of ``path`` as: ``line`` or ``row``."""
    return "row" if Path(path).suffix.lower() == ".parquet" else "line"


READERS.register(read_mvc_samples, name="mvc_samples")


def write_mvc_samples(samples: Iterable[MVCSample], path: str | os.PathLike[str]) -> Path:
    """Write ``samples`` as JSON Lines that :func:`read_mvc_samples` reads back (video paths
    as stored: absolute paths stay absolute). Written to a temporary sibling and renamed
    into place. Returns the path."""
    path = Path(path)
    if path.suffix.lower() not in (".jsonl", ".json"):
        raise ValueError(f"write_mvc_samples writes JSON Lines; give a .jsonl path, not {path}")
    with atomic_open(path) as f:
        for s in samples:
            record: dict[str, Any] = {"id": s.id, "video": s.video}
            if s.start is not None:
                record["start"] = s.start
            if s.end is not None:
                record["end"] = s.end
            record.update(s.captions)
            if s.hard_negatives:
                record["hard_negatives"] = list(s.hard_negatives)
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path
