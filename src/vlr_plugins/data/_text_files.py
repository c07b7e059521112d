"""UTF-8 text and JSON Lines files read so that a bad byte or line is reported with its file and line.

Python's text mode decodes in chunks, so its ``UnicodeDecodeError`` names a byte offset in
a chunk and no file. Every text reader of the package (samples, retrieval sets, image
lists, the benchmark readers, captions files, generated corpora) goes through these
functions instead, and a bad byte becomes a :class:`~vlr_plugins.errors.DataFormatError`
such as ``train.jsonl, line 7: not UTF-8 text: byte 0xff at column 12 ...``. A leading
byte-order mark (some Windows tools write one) is dropped. A line of a JSON Lines file
that is not JSON reads ``train.jsonl, line 7: invalid JSON: Expecting ',' delimiter
(column 12)``.
"""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Iterator
from typing import Any

from vlr_plugins.errors import DataFormatError

__all__ = ["json_line", "json_lines", "read_utf8", "utf8_lines"]


def _not_utf8(path: str | os.PathLike[str], line_no: int, line: bytes, e: UnicodeDecodeError) -> DataFormatError:
    column = len(line[: e.start].decode("utf-8", errors="replace")) + 1
    return DataFormatError(
        path,
        f"not UTF-8 text: byte 0x{line[e.start]:02x} at column {column} cannot be decoded; "
        "save the file as UTF-8",
        record=line_no,
    )


def utf8_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` for every line of ``path``, lines counted from 1 and kept
    with their line ending, as ``open(path, newline="")`` iterates them; lazy."""
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            if line_no == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            try:
                yield line_no, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise _not_utf8(path, line_no, raw, e) from None


def read_utf8(path: str | os.PathLike[str]) -> str:
    """The whole text of ``path``; a byte that is not UTF-8 is reported with its line."""
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        start = data.rfind(b"\n", 0, e.start) + 1
        end = data.find(b"\n", e.start)
        line = data[start: end if end >= 0 else len(data)]
        local = UnicodeDecodeError(e.encoding, line, e.start - start, e.end - start, e.reason)
        raise _not_utf8(path, data.count(b"\n", 0, e.start) + 1, line, local) from None


def json_line(path: str | os.PathLike[str], line_no: int, line: str, *, note: str = "") -> Any:
    """The JSON value on line ``line_no`` (``line``, as :func:`utf8_lines` gives it) of the
    JSON Lines file ``path``.

    A syntax error is a :class:`~vlr_plugins.errors.DataFormatError` naming the file, the
    line and the column; a first line that opens a JSON array is told that the file should
    hold one object per line. ``note`` is added to that message (why the file may be bad).
    """
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        hint = ""
        if line_no == 1 and line.lstrip().startswith("["):
            hint = "; this reader expects JSON Lines (one object per line), not an array"
        raise DataFormatError(path, f"invalid JSON: {e.msg} (column {e.colno}){hint}{note}",
                              record=line_no) from None


def json_lines(path: str | os.PathLike[str], *, skip_blank: bool = True, note: str = ""
               ) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for every line of the JSON Lines file ``path``, lines counted
    from 1, lazily: a reader that checks each value as it comes reports the first bad line,
    whichever way it is bad.

    Blank lines are skipped, or with ``skip_blank=False`` are invalid JSON (a file written
    only by the package, one record per line). Errors: see :func:`utf8_lines` (a byte that
    is not UTF-8) and :func:`json_line` (a line that is not JSON; ``note``).
    """
    for line_no, line in utf8_lines(path):
        if skip_blank and not line.strip():
            continue
        yield line_no, json_line(path, line_no, line, note=note)
