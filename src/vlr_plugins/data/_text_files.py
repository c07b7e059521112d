"""UTF-8 text files read so that a byte that is not UTF-8 is reported with its file and line.

Python's text mode decodes in chunks, so its ``UnicodeDecodeError`` names a byte offset in
a chunk and no file. Every text reader of :mod:`vlr_plugins.data` (samples, retrieval
sets, image lists, the benchmark readers) goes through these two functions instead, and
a bad byte becomes a :class:`~vlr_plugins.errors.DataFormatError` such as
``train.jsonl, line 7: not UTF-8 text: byte 0xff at column 12 ...``. A leading byte-order
mark (some Windows tools write one) is dropped.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Iterator

from vlr_plugins.errors import DataFormatError

__all__ = ["read_utf8", "utf8_lines"]


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
