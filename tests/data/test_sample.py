"""Reading paragraph-supervision samples: JSON Lines and Parquet agree, bad records say where."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlr_plugins.data import (
    TEXT_FIELDS,
    ParagraphSample,
    read_paragraph_samples,
    write_paragraph_samples,
)
from vlr_plugins.errors import DataFormatError, MissingEmbeddingsError
from vlr_plugins.registry import READERS

RECORDS = [
    {
        "id": "cc3m/000001",
        "caption": "a dog on the beach",
        "positives": [f"a dog runs along the sand, take {i}" for i in range(5)],
        "hard_negatives": [f"a cat sleeps on a sofa, take {i}" for i in range(5)],
        "paragraph": "A brown dog runs along a sandy beach. Waves break behind it.",
        "score": 8,
        "url": "http://example.com/1.jpg",  # extra metadata is ignored
    },
    {
        "id": "cc3m/000002",
        "caption": "city skyline at night",
        "positives": ["lights of tall buildings after dark"],
        "hard_negatives": [],
        "paragraph": None,
        "score": None,
    },
    {
        "id": "cc3m/000003",
        "caption": "a bowl of fruit",
        "positives": None,
        "hard_negatives": ["a bowl of soup"],
        "paragraph": "Apples and pears fill a white ceramic bowl on a wooden table.",
        "score": 6.5,
    },
]


def _expected(record: dict) -> ParagraphSample:
    return ParagraphSample(
        id=str(record["id"]),
        caption=record["caption"],
        positives=tuple(record.get("positives") or ()),
        hard_negatives=tuple(record.get("hard_negatives") or ()),
        paragraph=record.get("paragraph"),
        score=None if record.get("score") is None else float(record["score"]),
    )


def _write_jsonl(path: Path, records: list) -> Path:
    lines = [json.dumps(r) if not isinstance(r, str) else r for r in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _write_parquet(path: Path, records: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            ("id", pa.string()),
            ("caption", pa.string()),
            ("positives", pa.list_(pa.string())),
            ("hard_negatives", pa.list_(pa.string())),
            ("paragraph", pa.string()),
            ("score", pa.float64()),
            ("url", pa.string()),
        ]
    )
    pq.write_table(pa.Table.from_pylist(records, schema=schema), path)
    return path


def test_jsonl_and_parquet_read_identically(tmp_path):
    jsonl = _write_jsonl(tmp_path / "train.jsonl", [RECORDS[0], "", RECORDS[1], "  ", RECORDS[2]])
    parquet = _write_parquet(tmp_path / "train.parquet", RECORDS)

    from_jsonl = read_paragraph_samples(jsonl)
    from_parquet = read_paragraph_samples(parquet)

    assert from_jsonl == from_parquet == [_expected(r) for r in RECORDS]


def test_optional_fields_default_and_integer_ids_become_strings(tmp_path):
    path = _write_jsonl(tmp_path / "minimal.json", [{"id": 17, "caption": "a red kite"}])
    (sample,) = read_paragraph_samples(path)
    assert sample == ParagraphSample(id="17", caption="a red kite")
    assert sample.positives == () and sample.paragraph is None and sample.score is None


def test_write_then_read_round_trips(tmp_path):
    samples = [_expected(r) for r in RECORDS]
    path = write_paragraph_samples(samples, tmp_path / "out" / "samples.jsonl")
    assert read_paragraph_samples(path) == samples
    assert [p.name for p in path.parent.iterdir()] == ["samples.jsonl"]  # no temp file left


def test_texts_gives_tuples_per_field():
    sample = _expected(RECORDS[0])
    assert sample.texts("caption") == (sample.caption,)
    assert sample.texts("positives") == sample.positives
    assert sample.texts("hard_negatives") == sample.hard_negatives
    assert sample.texts("paragraph") == (sample.paragraph,)
    assert _expected(RECORDS[1]).texts("paragraph") == ()
    assert set(TEXT_FIELDS) == {"caption", "positives", "hard_negatives", "paragraph"}
    with pytest.raises(ValueError, match="no text field 'captions'"):
        sample.texts("captions")


def test_lists_become_tuples_so_samples_hash():
    sample = ParagraphSample(id="a", caption="c", positives=["p1", "p2"])
    assert sample.positives == ("p1", "p2")
    assert hash(sample) == hash(ParagraphSample(id="a", caption="c", positives=("p1", "p2")))


def test_reader_is_registered():
    assert READERS.get("paragraph_samples") is read_paragraph_samples
    assert "paragraph_samples" in READERS.names()


def _with(**changes) -> dict:
    record = dict(RECORDS[1], id="bad")
    for key, value in changes.items():
        if value is _DROP:
            record.pop(key)
        else:
            record[key] = value
    return record


_DROP = object()

MALFORMED = {
    "bad json": ('{"id": "bad", "caption": "x",', None),
    "not an object": ('["id", "caption"]', None),
    "missing caption": (_with(caption=_DROP), "caption"),
    "empty caption": (_with(caption="   "), "caption"),
    "missing id": (_with(id=_DROP), "id"),
    "positives not a list": (_with(positives=5), "positives"),
    "positive not a string": (_with(positives=["ok", 3]), "positives"),
    "hard negatives a string": (_with(hard_negatives="a cat"), "hard_negatives"),
    "paragraph a list": (_with(paragraph=["s1", "s2"]), "paragraph"),
    "score a string": (_with(score="7"), "score"),
    "score out of range": (_with(score=70), "score"),
    "duplicate id": (_with(id=RECORDS[0]["id"]), "id"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_jsonl_names_file_line_and_field(tmp_path, case):
    bad, field = MALFORMED[case]
    # a blank line before the bad record: line numbers count it, as editors do
    path = _write_jsonl(tmp_path / "train.jsonl", [RECORDS[0], "", bad, RECORDS[2]])

    with pytest.raises(DataFormatError) as info:
        read_paragraph_samples(path)

    err = info.value
    assert (Path(err.path), err.record, err.field) == (path, 3, field)
    message = str(err)
    assert message.startswith(f"{path}, line 3")
    if field is not None:
        assert f"field {field!r}" in message
    if case == "duplicate id":
        assert "first seen on line 1" in message


def test_error_message_reads_file_line_field_then_problem():
    err = DataFormatError(
        "train.jsonl", "expected a list of strings, found int", record=7, field="positives"
    )
    assert str(err) == (
        "train.jsonl, line 7, field 'positives': expected a list of strings, found int"
    )
    assert isinstance(err, ValueError)


def test_json_array_file_gets_a_hint(tmp_path):
    path = tmp_path / "train.json"
    path.write_text(json.dumps(RECORDS, indent=1), encoding="utf-8")
    with pytest.raises(DataFormatError, match="JSON Lines"):
        read_paragraph_samples(path)


def test_malformed_parquet_names_row_and_field(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "id": ["a", "b", "a"],
            "caption": ["one", "two", "three"],
            "score": ["7", None, None],  # a string column where a number belongs
        }
    )
    path = tmp_path / "train.parquet"
    pq.write_table(table, path)
    with pytest.raises(DataFormatError) as info:
        read_paragraph_samples(path)
    assert (info.value.record, info.value.field) == (0, "score")
    assert str(info.value).startswith(f"{path}, row 0, field 'score'")

    pq.write_table(table.drop_columns(["score"]), path)
    duplicate = "row 2, field 'id': duplicate id 'a', first seen on row 0"
    with pytest.raises(DataFormatError, match=duplicate):
        read_paragraph_samples(path)


def test_unsupported_suffix(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("id,caption\n1,x\n")
    with pytest.raises(ValueError, match=r"\.jsonl, \.json, \.parquet, \.csv, \.tsv"):
        read_paragraph_samples(path)


def test_csv_and_tsv_read_like_jsonl(tmp_path):
    import csv

    jsonl = read_paragraph_samples(_write_jsonl(tmp_path / "train.jsonl", RECORDS))
    for name, sep in (("train.csv", ","), ("train.tsv", "\t")):
        with open(tmp_path / name, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f, delimiter=sep)
            writer.writerow(["id", "caption", "positives", "hard_negatives", "paragraph"])
            for r in RECORDS:
                # list fields as JSON lists, missing values as empty cells
                writer.writerow([r["id"], r["caption"], json.dumps(r["positives"]) if r["positives"] else "",
                                 json.dumps(r["hard_negatives"]) if r["hard_negatives"] else "",
                                 r["paragraph"] or ""])
        table = read_paragraph_samples(tmp_path / name)
        assert table == [ParagraphSample(s.id, s.caption, s.positives, s.hard_negatives, s.paragraph)
                         for s in jsonl]


def test_a_csv_list_cell_may_hold_one_plain_text_and_bad_json_is_named(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('id,caption,positives\na,x,a plain text\nb,y,"[""one"", ""two""]"\n')
    a, b = read_paragraph_samples(path)
    assert a.positives == ("a plain text",) and b.positives == ("one", "two")
    path.write_text('id,caption,positives\na,x,"[""one"", oops]"\n')
    with pytest.raises(DataFormatError, match=r"t.csv, line 2, field 'positives': expected a JSON list"):
        read_paragraph_samples(path)


def test_tables_without_ids_number_their_rows_and_need_their_columns(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_text("filepath\ttitle\na.png\tfirst\nb.png\tsecond\n")
    samples = read_paragraph_samples(path, caption_key="title", media_key="filepath")
    assert [(s.id, s.caption, s.media) for s in samples] == [
        ("0", "first", str(tmp_path / "a.png")), ("1", "second", str(tmp_path / "b.png"))]
    with pytest.raises(DataFormatError, match=r"t.tsv, field 'image': no column 'image'"):
        read_paragraph_samples(path, caption_key="title", media_key="image")


def test_media_paths_are_resolved_and_required_when_asked_for(tmp_path):
    records = [{**RECORDS[0], "image": "imgs/a.jpg"}, {**RECORDS[1], "image": "/abs/b.jpg"}]
    path = _write_jsonl(tmp_path / "train.jsonl", records)
    a, b = read_paragraph_samples(path, media_key="image")
    assert (a.media, b.media) == (str(tmp_path / "imgs/a.jpg"), "/abs/b.jpg")
    (c, _) = read_paragraph_samples(path, media_key="image", media_root="/data")
    assert c.media == "/data/imgs/a.jpg"
    assert read_paragraph_samples(path)[0].media is None  # not asked for: not read
    _write_jsonl(path, [records[0], RECORDS[2]])
    with pytest.raises(DataFormatError, match=r"train.jsonl, line 2, field 'image': expected the path"):
        read_paragraph_samples(path, media_key="image")
    # written back, the media path survives a round trip under the key "media"
    out = write_paragraph_samples([a], tmp_path / "out.jsonl")
    assert read_paragraph_samples(out, media_key="media") == [a]


def test_one_record_from_another_source_follows_the_same_rules():
    from vlr_plugins.data import sample_from_record

    raw = {"id": "k1", "caption": "a cat", "positives": ["a small cat"]}
    assert sample_from_record(raw, "shard-0.tar#k1", kind="sample") == ParagraphSample(
        "k1", "a cat", ("a small cat",))
    with pytest.raises(DataFormatError, match=r"^shard-0.tar#k1, field 'positives': expected a list"):
        sample_from_record({**raw, "positives": "a small cat"}, "shard-0.tar#k1", kind="sample")
    with pytest.raises(DataFormatError, match=r"^shard-0.tar#k1: expected a JSON object, found list"):
        sample_from_record([raw], "shard-0.tar#k1", kind="sample")


def test_missing_embeddings_error_lists_count_and_first_ids():
    missing = [f"img{i}" for i in range(25)]
    err = MissingEmbeddingsError(missing, "emb/cc3m")
    message = str(err)
    assert message.startswith("25 ids have no embedding in embedding store emb/cc3m")
    assert "'img19'" in message and "'img20'" not in message and "and 5 more" in message
    assert err.missing == missing and isinstance(err, KeyError)
