"""UTF-8 text files: the lines as Python's text mode gives them, and a bad byte named by file, line and column;
JSON Lines files: one value per line, a line that is not JSON named by file, line and column."""

from __future__ import annotations

import codecs

import pytest

from vlr_plugins.data._text_files import json_lines, read_utf8, utf8_lines
from vlr_plugins.errors import DataFormatError

TEXT = 'first line\n{"caption": "café, naïve"}\r\n\nlast line without a newline'


def test_lines_are_those_of_text_mode_with_newline_kept(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(TEXT.encode("utf-8"))
    with open(path, encoding="utf-8", newline="") as f:
        expected = list(enumerate(f, start=1))
    assert list(utf8_lines(path)) == expected
    assert read_utf8(path) == TEXT


def test_a_byte_order_mark_is_dropped(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(codecs.BOM_UTF8 + TEXT.encode("utf-8"))
    assert next(iter(utf8_lines(path))) == (1, "first line\n")
    assert read_utf8(path) == TEXT


@pytest.mark.parametrize("lines, line, column, byte", [
    ([b"ok\n", b"caf\xe9 latin-1\n", b"more\n"], 2, 4, 0xE9),
    ([b"\xff\xfeU\x00T\x00F\x00-16\n"], 1, 1, 0xFF),
    ([b"ok\n", b"\xc3\xa9t\xc3\xa9 and then \x80\n"], 2, 14, 0x80),  # columns count characters, not bytes
])
def test_a_byte_that_is_not_utf8_names_file_line_and_column(tmp_path, lines, line, column, byte):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"".join(lines))
    expected = f"{path}, line {line}: not UTF-8 text: byte 0x{byte:02x} at column {column}"
    with pytest.raises(DataFormatError, match=expected) as lazily:
        list(utf8_lines(path))
    with pytest.raises(DataFormatError, match=expected) as whole:
        read_utf8(path)
    assert lazily.value.record == whole.value.record == line and isinstance(whole.value, ValueError)


def test_lines_before_a_bad_byte_are_read(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"one\ntwo\n\xff\n")
    lines = utf8_lines(path)
    assert [next(lines), next(lines)] == [(1, "one\n"), (2, "two\n")]
    with pytest.raises(DataFormatError, match="line 3"):
        next(lines)


def test_json_lines_gives_each_value_with_its_line_and_skips_blank_lines(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(codecs.BOM_UTF8 + b'{"id": 1}\r\n\n  \n[2, "caf\xc3\xa9"]\n"three"')
    assert list(json_lines(path)) == [(1, {"id": 1}), (4, [2, "café"]), (5, "three")]
    with pytest.raises(DataFormatError, match=r"a.jsonl, line 2: invalid JSON: Expecting value \(column 1\)$"):
        list(json_lines(path, skip_blank=False))


def test_a_line_that_is_not_json_names_file_line_and_column(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"id": 1}\n{"id" 2}\n', encoding="utf-8")
    values = json_lines(path, note="; the file was changed")
    assert next(values) == (1, {"id": 1})
    with pytest.raises(DataFormatError) as e:
        next(values)
    assert str(e.value) == (f"{path}, line 2: invalid JSON: Expecting ':' delimiter "
                            "(column 7); the file was changed")
    assert e.value.record == 2


def test_a_json_array_is_told_to_be_json_lines(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('[\n  {"id": 1}\n]\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"line 1: invalid JSON: .*; this reader expects JSON Lines "
                                              r"\(one object per line\), not an array$"):
        list(json_lines(path))
