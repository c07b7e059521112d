"""What every reader shares: JSON loading, record checks, and building the RetrievalSet.

Checks raise :class:`~vlr_plugins.errors.DataFormatError` through an ``error(field,
problem)`` function bound to one record (:func:`record_error`), so that each message names
the file, the record and the field the same way in every reader.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from vlr_plugins.data._text_files import read_utf8, utf8_lines
from vlr_plugins.data.retrieval_set import RetrievalSet
from vlr_plugins.errors import DataFormatError, _type_name

ErrorFn = Callable[[str | None, str], DataFormatError]

_PICKLE_SUFFIXES = (".pkl", ".pickle")


def record_error(path: str, record: Any, record_kind: str = "record") -> ErrorFn:
    """A ``(field, problem) -> DataFormatError`` bound to one record of ``path``."""

    def error(field: str | None, problem: str) -> DataFormatError:
        return DataFormatError(path, problem, record=record, field=field, record_kind=record_kind)

    return error


def reject_pickle(path: str, instead: str) -> None:
    """Refuse ``.pkl`` files: unpickling runs arbitrary code, so these readers never do it."""
    if path.lower().endswith(_PICKLE_SUFFIXES):
        raise DataFormatError(
            path,
            "refusing to unpickle (loading a pickle can run arbitrary "
            f"code); give {instead} instead",
        )


# --- loading ------------------------------------------------------------------------


def read_text(path: str) -> str:
    """The text of ``path``; a byte that is not UTF-8 is a :class:`DataFormatError` naming
    the line (a byte-order mark is dropped)."""
    return read_utf8(path)


def _invalid_json(path: str, e: json.JSONDecodeError, line: int | None) -> DataFormatError:
    if line is None:
        # the image readers' wording: the line inside the message, no record
        return DataFormatError(path, f"invalid JSON: {e.msg} (line {e.lineno}, column {e.colno})")
    return DataFormatError(path, f"invalid JSON: {e.msg} (column {e.colno})", record=line)


def parse_json(path: str, text: str, *, line_as_record: bool = True) -> Any:
    """``text`` (read from ``path``) as JSON; a syntax error names its line.

    The line is the error's record (``path, line 3: invalid JSON: ...``), or, without
    ``line_as_record``, part of the message (``path: invalid JSON: ... (line 3, column 5)``).
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise _invalid_json(path, e, e.lineno if line_as_record else None) from None


def load_json(path: str, *, line_as_record: bool = True) -> Any:
    """The JSON file ``path``; see :func:`parse_json` for how syntax errors read."""
    return parse_json(path, read_text(path), line_as_record=line_as_record)


def text_lines(path: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` for every non-blank line of a text file; lines count from 1.

    Lazy, so a reader that validates while iterating reports the first bad line, whichever
    way it is bad (a byte that is not UTF-8 included).
    """
    for line_no, line in utf8_lines(path):
        if line.strip():
            yield line_no, line


def first_char(path: str) -> str:
    """The first non-blank character of a text file, to tell a JSON array from JSON Lines."""
    for _, line in utf8_lines(path):
        stripped = line.lstrip()
        if stripped:
            return stripped[0]
    return ""


# --- checks -------------------------------------------------------------------------


def expect_list(path: str, data: Any, shape: str) -> list[Any]:
    if not isinstance(data, list):
        raise DataFormatError(path, f"expected a JSON array of {shape}, found {_type_name(data)}")
    if not data:
        raise DataFormatError(path, f"expected a JSON array of {shape}, found an empty one")
    return data


def expect_list_fields(path: str, data: dict[str, Any], fields: Sequence[str]) -> None:
    """Each of ``data[field]`` is a list (the top-level arrays of COCO or MSR-VTT files)."""
    for field in fields:
        if not isinstance(data.get(field), list):
            raise DataFormatError(
                path, f"expected a list, found {_type_name(data.get(field))}", field=field
            )


def expect_object(rec: Any, error: ErrorFn) -> dict[str, Any]:
    if not isinstance(rec, dict):
        raise error(None, f"expected an object, found {_type_name(rec)}")
    return rec


def text_field(rec: dict[str, Any], field: str, error: ErrorFn) -> str:
    """``rec[field]`` as a non-empty string."""
    value = rec.get(field)
    if field not in rec:
        raise error(field, "missing")
    if not isinstance(value, str):
        raise error(field, f"expected a string, found {_type_name(value)}")
    if not value.strip():
        raise error(field, "expected a non-empty string, found an empty one")
    return value


def text_value(value: Any, field: str, error: ErrorFn) -> str:
    """``value`` as a non-empty string; the message quotes what was found as JSON."""
    if not isinstance(value, str) or not value.strip():
        raise error(field, f"expected a non-empty string, found {json.dumps(value)}")
    return value


def one_of(value: Any, choices: Sequence[str], field: str, error: ErrorFn) -> str:
    """``value`` if it is one of ``choices`` (a split label, say)."""
    if value not in choices:
        raise error(field, f"expected one of {', '.join(choices)}, found {json.dumps(value)}")
    return value


def text_list(
    rec: dict[str, Any], field: str, error: ErrorFn, *, allow_str: bool = False
) -> list[str]:
    """``rec[field]`` as a non-empty list of non-empty strings (or one string if ``allow_str``)."""
    if field not in rec:
        raise error(field, "missing")
    value = rec[field]
    if allow_str and isinstance(value, str):
        value = [value]
    expected = (
        "a string or a non-empty list of strings" if allow_str else "a non-empty list of strings"
    )
    if not isinstance(value, list) or not value:
        found = "an empty list" if value == [] else _type_name(value)
        raise error(field, f"expected {expected}, found {found}")
    for i, t in enumerate(value):
        if not isinstance(t, str):
            raise error(f"{field}[{i}]", f"expected a string, found {_type_name(t)}")
        if not t.strip():
            raise error(f"{field}[{i}]", "expected a non-empty string, found an empty one")
    return value


def stem(file_name: str) -> str:
    return os.path.splitext(os.path.basename(file_name))[0]


# --- building -----------------------------------------------------------------------


def build_set(
    name: str,
    path: str,
    ids: Sequence[str],
    media: Sequence[str],
    texts: Sequence[str],
    owner: Sequence[int],
    media_root: str | os.PathLike[str] | None,
    check_media: bool,
    *,
    categories: Sequence[str | None] | None = None,
    text_kinds: Sequence[str] | None = None,
) -> RetrievalSet:
    """The :class:`RetrievalSet` read from ``path``; refuses an empty one, checks media on demand."""
    if not ids:
        raise DataFormatError(path, "no items")
    rs = RetrievalSet(
        name=name,
        item_ids=tuple(ids),
        texts=tuple(texts),
        text_owner=torch.tensor(owner, dtype=torch.long),
        media=tuple(media),
        media_root=None if media_root is None else os.fspath(media_root),
        categories=None if categories is None else tuple(categories),
        text_kinds=None if text_kinds is None else tuple(text_kinds),
    )
    if check_media:
        rs.check_media()
    return rs


class SetBuilder:
    """Accumulates items and texts in reading order, then builds one :class:`RetrievalSet`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.ids: list[str] = []
        self.media: list[str] = []
        self.categories: list[str | None] = []
        self.texts: list[str] = []
        self.owner: list[int] = []
        self.kinds: list[str] = []
        self.index: dict[str, int] = {}

    def item(self, item_id: str, media: str, category: str | None = None) -> int:
        """The index of ``item_id``, added on first sight."""
        if item_id not in self.index:
            self.index[item_id] = len(self.ids)
            self.ids.append(item_id)
            self.media.append(media)
            self.categories.append(category)
        return self.index[item_id]

    def text(self, owner: int, text: str, kind: str) -> None:
        self.owner.append(owner)
        self.texts.append(text)
        self.kinds.append(kind)

    def build(
        self, name: str, media_root: str | os.PathLike[str] | None, check_media: bool
    ) -> RetrievalSet:
        has_categories = any(c is not None for c in self.categories)
        return build_set(
            name,
            self.path,
            self.ids,
            self.media,
            self.texts,
            self.owner,
            media_root,
            check_media,
            categories=self.categories if has_categories else None,
            text_kinds=self.kinds,
        )
