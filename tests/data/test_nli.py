"""SimCSE's NLI CSV: triplets and pairs, quoting, and every bad record named by line and column."""

from __future__ import annotations

import csv

import pytest

from vlr_plugins.data import NLITriplet, read_nli_triplets
from vlr_plugins.errors import DataFormatError
from vlr_plugins.registry import READERS

ROWS = [
    ("A man is playing a guitar.", "A person plays music.", "Nobody is playing anything."),
    ('She said "hello", then left.', "A woman spoke.", "A woman stayed silent,\nall day."),
]


def write(path, rows, header=("sent0", "sent1", "hard_neg")):
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_reads_triplets_exactly_as_csv_writes_them(tmp_path):
    got = read_nli_triplets(write(tmp_path / "nli.csv", ROWS))
    assert got == [NLITriplet(*r) for r in ROWS]
    assert READERS.get("nli_triplets") is read_nli_triplets


def test_pairs_have_no_hard_negative(tmp_path):
    got = read_nli_triplets(write(tmp_path / "pairs.csv", [r[:2] for r in ROWS], header=("sent0", "sent1")))
    assert [t.hard_neg for t in got] == [None, None] and got[0].sent1 == ROWS[0][1]


def test_a_row_with_a_missing_field_is_named_by_line(tmp_path):
    path = tmp_path / "nli.csv"
    path.write_text('sent0,sent1,hard_neg\na,b,c\n"x\ny",b\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"nli.csv, line 4: expected 3 fields \(sent0,sent1,hard_neg\), found 2"):
        read_nli_triplets(path)


def test_an_empty_sentence_is_named_by_line_and_column_or_kept_as_simcse_does(tmp_path):
    path = tmp_path / "nli.csv"
    path.write_text("sent0,sent1,hard_neg\na,b,c\nd,,f\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"nli.csv, line 3, field 'sent1': empty sentence"):
        read_nli_triplets(path)
    assert read_nli_triplets(path, on_empty="space")[1] == NLITriplet("d", " ", "f")


@pytest.mark.parametrize("text, message", [
    ("premise,hypothesis,label\na,b,c\n", r"line 1: expected the header sent0,sent1,hard_neg \(or sent0,sent1\), "
                                          r"found 'premise,hypothesis,label'"),
    ("", "the file is empty"),
    ("sent0,sent1,hard_neg\n", "no records after the header"),
])
def test_bad_files_say_what_was_expected(tmp_path, text, message):
    path = tmp_path / "nli.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataFormatError, match=message):
        read_nli_triplets(path)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(DataFormatError, match=r"nope.csv: no such file"):
        read_nli_triplets(tmp_path / "nope.csv")
