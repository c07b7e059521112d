"""Paragraph-supervision training samples: one image id with its texts at several granularities."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlr_plugins._io import atomic_open
from vlr_plugins.data._text_files import json_lines, utf8_lines
from vlr_plugins.errors import DataFormatError, _type_name
from vlr_plugins.registry import READERS

__all__ = [
    "ParagraphSample",
    "SAMPLE_SUFFIXES",
    "TEXT_FIELDS",
    "read_paragraph_samples",
    "sample_from_record",
    "write_paragraph_samples",
]

#: The text fields a recipe may name, and whether each holds one text or many.
TEXT_FIELDS: dict[str, str] = {
    "caption": "one",
    "positives": "many",
    "hard_negatives": "many",
    "paragraph": "one",
}

_JSONL_SUFFIXES = (".jsonl", ".json")
_PARQUET_SUFFIXES = (".parquet",)
_TABLE_SUFFIXES = (".csv", ".tsv")
#: the file suffixes :func:`read_paragraph_samples` reads
SAMPLE_SUFFIXES = (*_JSONL_SUFFIXES, *_PARQUET_SUFFIXES, *_TABLE_SUFFIXES)
_SCORE_RANGE = (0.0, 10.0)


@dataclass(frozen=True)
class ParagraphSample:
    """One training image and its texts (paper sec. 3.1).

    Attributes:
        id: the image id; the key into the precomputed image-embedding store.
        caption: the original (e.g. CC3M) caption.
        positives: generated captions that describe the image correctly (paper: 5).
        hard_negatives: similar-sounding captions that do not (paper: 5).
        paragraph: a 3-6 sentence description, or ``None``.
        score: the judge's 0-10 faithfulness score of the paragraph, or ``None``.
        media: the path of the image (or video), when the reader was asked for it
            (``media_key``); samples trained against stored embeddings need none.

    Lists given for ``positives`` / ``hard_negatives`` are stored as tuples so that
    samples stay hashable.
    """

    id: str
    caption: str
    positives: tuple[str, ...] = ()
    hard_negatives: tuple[str, ...] = ()
    paragraph: str | None = None
    score: float | None = None
    media: str | None = None

    def __post_init__(self) -> None:
        for name in ("positives", "hard_negatives"):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))

    def texts(self, field: str) -> tuple[str, ...]:
        """The texts of ``field`` (a key of :data:`TEXT_FIELDS`) as a tuple.

        A one-text field gives a 1-tuple, or ``()`` when it is ``None``.
        """
        kind = TEXT_FIELDS.get(field)
        if kind is None:
            raise ValueError(f"no text field {field!r}; known: {', '.join(TEXT_FIELDS)}")
        value = getattr(self, field)
        if kind == "many":
            return value
        return () if value is None else (value,)


class _Record:
    """Validates the fields of one raw record, raising errors that point at it.

    ``needs`` says what every record of the corpus must hold (for "missing" messages);
    other sample schemas (:mod:`vlr_plugins.data.mvc_samples`) subclass it with their own."""

    needs = "every record needs an id and a caption"

    def __init__(self, raw: dict[str, Any], path: str | os.PathLike[str], record: int | None, kind: str):
        self.raw, self.path, self.record, self.kind = raw, path, record, kind

    def error(self, field: str | None, problem: str) -> DataFormatError:
        return DataFormatError(
            self.path, problem, record=self.record, field=field, record_kind=self.kind
        )

    def id(self) -> str:
        value = self.raw.get("id")
        if "id" not in self.raw or value is None:
            raise self.error("id", f"missing; {self.needs}")
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise self.error("id", f"expected a string or an integer, found {_type_name(value)}")
        if isinstance(value, str) and not value.strip():
            raise self.error("id", "expected a non-empty string, found an empty one")
        return str(value)

    def one_text(self, field: str, *, required: bool) -> str | None:
        value = self.raw.get(field)
        if value is None:
            if required:
                raise self.error(field, f"missing; {self.needs}")
            return None
        if not isinstance(value, str):
            expected = "a string" if required else "a string or null"
            raise self.error(field, f"expected {expected}, found {_type_name(value)}")
        if not value.strip():
            raise self.error(field, "expected a non-empty string, found an empty one")
        return value

    def many_texts(self, field: str) -> tuple[str, ...]:
        value = self.raw.get(field)
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.error(field, f"expected a list of strings, found {_type_name(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise self.error(
                    field, f"expected a list of strings, found {_type_name(item)} at index {i}"
                )
            if not item.strip():
                raise self.error(
                    field, f"expected non-empty strings, found an empty one at index {i}"
                )
        return tuple(value)

    def score(self) -> float | None:
        value = self.raw.get("score")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error("score", f"expected a number or null, found {_type_name(value)}")
        lo, hi = _SCORE_RANGE
        if not (math.isfinite(value) and lo <= value <= hi):
            raise self.error("score", f"expected a number between {lo:g} and {hi:g}, found {value}")
        return float(value)

    def media(self, key: str, root: Path) -> str:
        value = self.raw.get(key)
        if not isinstance(value, str) or not value.strip():
            found = "nothing" if value is None else f"{_type_name(value)} {value!r}"
            raise self.error(key, f"expected the path of the sample's image or video, found {found}")
        p = Path(value)
        return str(p if p.is_absolute() else root / p)

    def sample(self, media_key: str | None = None, media_root: Path | None = None) -> ParagraphSample:
        return ParagraphSample(
            id=self.id(),
            caption=self.one_text("caption", required=True),  # type: ignore[arg-type]
            positives=self.many_texts("positives"),
            hard_negatives=self.many_texts("hard_negatives"),
            paragraph=self.one_text("paragraph", required=False),
            score=self.score(),
            media=self.media(media_key, media_root or Path(".")) if media_key else None,
        )


def sample_from_record(
    raw: Any,
    path: str | os.PathLike[str],
    record: int | None = None,
    *,
    kind: str = "line",
    media_key: str | None = None,
    media_root: str | os.PathLike[str] | None = None,
) -> ParagraphSample:
    """One :class:`ParagraphSample` from a raw mapping, under the rules of
    :func:`read_paragraph_samples`; errors name ``path``, ``record`` (a ``kind``: line,
    row, sample...) and the field. For record sources other than files (a webdataset
    sample's ``.json``)."""
    if not isinstance(raw, dict):
        raise DataFormatError(path, f"expected a JSON object, found {_type_name(raw)}",
                              record=record, record_kind=kind)
    root = Path(media_root) if media_root is not None else Path(path).parent
    return _Record(raw, path, record, kind).sample(media_key, root)


def _require_columns(path: Path, columns: list[str], needed: Iterable[str], extra: str = "") -> None:
    for column in needed:
        if column not in columns:
            raise DataFormatError(path, f"no column {column!r}; columns: {columns}{extra}", field=column)


def _parquet_records(path: Path, needed: Iterable[str]) -> Iterator[tuple[int, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        raise DataFormatError(path, f"not a readable Parquet file: {e}") from e
    _require_columns(path, pf.schema_arrow.names, needed)
    row = 0
    for batch in pf.iter_batches(batch_size=8192):
        for raw in batch.to_pylist():
            yield row, raw
            row += 1


def _table_cell(field: str, value: str) -> Any:
    """A CSV/TSV cell as the record value: a list field holds a JSON list, or one text."""
    if TEXT_FIELDS.get(field) != "many":
        return value
    if not value.lstrip().startswith("["):
        return [value]
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise ValueError(f"expected a JSON list of strings: {e.msg}") from None


def _table_records(path: Path, separator: str, needed: Iterable[str]) -> Iterator[tuple[int, Any]]:
    """CSV / TSV rows (open_clip's layout): a header line, empty cells are missing values,
    list fields as JSON lists; without an ``id`` column the 0-based row number is the id."""
    import csv

    reader = csv.DictReader((line for _, line in utf8_lines(path)), delimiter=separator)
    _require_columns(path, list(reader.fieldnames or []), needed, f" (separator {separator!r})")
    for row, cells in enumerate(reader):
        raw: dict[str, Any] = {"id": str(row)}
        for key, value in cells.items():
            if key is None or value is None or value == "":
                continue
            try:
                raw[key] = _table_cell(key, value)
            except ValueError as e:
                raise DataFormatError(path, str(e), record=reader.line_num, field=key) from None
        yield reader.line_num, raw


def read_paragraph_samples(
    path: str | os.PathLike[str],
    *,
    media_key: str | None = None,
    media_root: str | os.PathLike[str] | None = None,
    caption_key: str = "caption",
    separator: str | None = None,
) -> list[ParagraphSample]:
    """Read and validate paragraph-supervision samples from JSON Lines, Parquet or CSV/TSV.

    Expects ``.jsonl`` / ``.json`` (JSON Lines: one object per line; blank lines are
    skipped), ``.parquet`` (one row per sample) or ``.csv`` / ``.tsv`` (open_clip's
    layout: a header line; ``separator`` defaults to a comma for ``.csv`` and a tab for
    ``.tsv``; list fields as JSON lists; without an ``id`` column the 0-based row number
    is the id), each record holding

    ==================  ===========================  =====================
    key                 type                         if missing or null
    ==================  ===========================  =====================
    ``id``              string or integer            error
    ``caption``         non-empty string             error
    ``positives``       list of non-empty strings    ``()``
    ``hard_negatives``  list of non-empty strings    ``()``
    ``paragraph``       non-empty string             ``None``
    ``score``           number in [0, 10]            ``None``
    ==================  ===========================  =====================

    ``caption_key`` names the key holding the caption (open_clip's ``--csv-caption-key``).
    With ``media_key`` (e.g. ``"image"``), every record must also give the path of its
    image or video under that key; relative paths are taken from ``media_root`` (default:
    the file's folder) and land in ``ParagraphSample.media``. Other keys are ignored,
    since real corpora carry extra metadata (urls, licences, generator versions). Integer
    ids become strings, so that they match the ids of an
    :class:`~vlr_plugins.data.EmbeddingStore`. Every record is validated before
    anything is returned; the first problem raises :class:`DataFormatError` naming
    the file, the line (1-based) or Parquet row (0-based), and the field. A repeated
    id is an error naming both places.

    Reference: the training samples of paper sec. 3.1 (original caption, five
    positives, five hard negatives, one judge-scored paragraph).

    Relations: :func:`write_paragraph_samples` writes the JSON Lines form; the ids
    index the store written by :func:`~vlr_plugins.precompute.precompute_image_embeddings`;
    :func:`sample_from_record` applies the same rules to one mapping.

    Example::

        >>> samples = read_paragraph_samples("cc3m_paragraphs.jsonl")  # doctest: +SKIP
        >>> samples[0].texts("positives")  # doctest: +SKIP
        ('a dog runs on the beach', ...)
    """
    path = Path(path)
    suffix = path.suffix.lower()
    needed = [k for k in (caption_key, media_key) if k]
    if suffix in _JSONL_SUFFIXES:
        records, kind = json_lines(path), "line"
    elif suffix in _PARQUET_SUFFIXES:
        records, kind = _parquet_records(path, needed), "row"
    elif suffix in _TABLE_SUFFIXES:
        sep = separator or ("\t" if suffix == ".tsv" else ",")
        records, kind = _table_records(path, sep, needed), "line"
    else:
        raise ValueError(
            f"cannot read paragraph samples from {path}: expected one of "
            f"{', '.join(SAMPLE_SUFFIXES)}, found suffix {path.suffix or '(none)'!r}"
        )
    root = Path(media_root) if media_root is not None else path.parent
    samples: list[ParagraphSample] = []
    first_seen: dict[str, int] = {}
    for record, raw in records:
        if isinstance(raw, dict) and caption_key != "caption":
            raw = {**raw, "caption": raw.get(caption_key)}
        sample = sample_from_record(raw, path, record, kind=kind, media_key=media_key, media_root=root)
        if sample.id in first_seen:
            raise DataFormatError(
                path, f"duplicate id {sample.id!r}, first seen on {kind} {first_seen[sample.id]}",
                record=record, field="id", record_kind=kind,
            )
        first_seen[sample.id] = record
        samples.append(sample)
    return samples


READERS.register(read_paragraph_samples, name="paragraph_samples")


def write_paragraph_samples(
    samples: Iterable[ParagraphSample], path: str | os.PathLike[str]
) -> Path:
    """Write ``samples`` as JSON Lines that :func:`read_paragraph_samples` reads back.

    The file is written to a temporary sibling and renamed into place, so readers
    never see a half-written file and a failure leaves any previous file untouched.
    Returns the path written.
    """
    path = Path(path)
    if path.suffix.lower() not in _JSONL_SUFFIXES:
        raise ValueError(
            f"write_paragraph_samples writes JSON Lines; give a .jsonl path, not {path}"
        )
    with atomic_open(path) as f:
        for s in samples:
            record = {
                "id": s.id,
                "caption": s.caption,
                "positives": list(s.positives),
                "hard_negatives": list(s.hard_negatives),
                "paragraph": s.paragraph,
                "score": s.score,
            }
            if s.media is not None:
                record["media"] = s.media
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path
