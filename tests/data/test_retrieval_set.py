"""read_retrieval_jsonl: items with any number of texts, and errors that point at the line."""

from __future__ import annotations

import json

import pytest
import torch

from vlr_plugins.data.retrieval_set import RetrievalSet, read_retrieval_jsonl
from vlr_plugins.errors import DataFormatError


def write_lines(path, lines: list[str]):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_reads_items_texts_and_owners(tmp_path):
    path = write_lines(tmp_path / "flickr_test.jsonl", [
        json.dumps({"id": "b.jpg", "texts": ["a dog", "a brown dog"]}),
        "",  # blank lines are skipped
        json.dumps({"id": 17, "texts": ["a car"], "extra": "ignored"}),
        json.dumps({"id": "a.jpg", "texts": ["two cats", "cats on a sofa", "a sofa"]}),
    ])

    rs = read_retrieval_jsonl(path)

    assert isinstance(rs, RetrievalSet)
    assert rs.name == "flickr_test"
    assert rs.item_ids == ("b.jpg", "17", "a.jpg")
    assert len(rs) == 3
    assert rs.texts == ("a dog", "a brown dog", "a car", "two cats", "cats on a sofa", "a sofa")
    assert rs.text_owner.dtype == torch.long
    assert rs.text_owner.tolist() == [0, 0, 1, 2, 2, 2]
    assert rs.texts_of(0) == ["a dog", "a brown dog"]
    assert rs.texts_of(1) == ["a car"]
    assert rs.texts_of(2) == ["two cats", "cats on a sofa", "a sofa"]


def test_owners_index_item_ids(tmp_path):
    records = [{"id": f"img{i}", "texts": [f"text {i}.{j}" for j in range(1 + i % 3)]}
               for i in range(7)]
    path = write_lines(tmp_path / "s.jsonl", [json.dumps(r) for r in records])

    rs = read_retrieval_jsonl(path, name="val")

    assert rs.name == "val"
    for text, owner in zip(rs.texts, rs.text_owner.tolist()):
        assert text in records[owner]["texts"]
        assert rs.item_ids[owner] == records[owner]["id"]
    assert [rs.texts_of(i) for i in range(len(rs))] == [r["texts"] for r in records]


GOOD = json.dumps({"id": "x", "texts": ["a dog"]})


@pytest.mark.parametrize(
    ("bad_line", "field", "problem"),
    [
        ('{"id": "y", "texts": ["a cat"', None, "invalid JSON"),
        ('["y", ["a cat"]]', None, "expected an object, found list"),
        (json.dumps({"id": "y"}), "texts", "expected a non-empty list of non-empty strings"),
        (json.dumps({"id": "y", "texts": []}), "texts", "non-empty list"),
        (json.dumps({"id": "y", "texts": "a cat"}), "texts", "non-empty list"),
        (json.dumps({"id": "y", "texts": ["a cat", "  "]}), "texts", "non-empty strings"),
        (json.dumps({"id": "y", "texts": ["a cat", 3]}), "texts", "non-empty strings"),
        (json.dumps({"texts": ["a cat"]}), "id", "expected a non-empty string or an integer"),
        (json.dumps({"id": "x", "texts": ["a cat"]}), "id", "duplicate id 'x' (first on line 1)"),
    ],
    ids=["bad-json", "not-object", "missing-texts", "empty-texts", "texts-not-list",
         "blank-text", "text-not-string", "missing-id", "duplicate-id"],
)
def test_malformed_lines_name_file_line_and_field(tmp_path, bad_line, field, problem):
    path = write_lines(tmp_path / "val.jsonl", [GOOD, "", bad_line])

    with pytest.raises(DataFormatError) as info:
        read_retrieval_jsonl(path)

    err = info.value
    assert (err.path, err.record, err.field) == (str(path), 3, field)
    where = f"{path}, line 3" + ("" if field is None else f", field {field!r}")
    assert str(err).startswith(where + ": ")
    assert problem in str(err)


@pytest.mark.parametrize("content", ["", "\n  \n"])
def test_an_empty_file_is_an_error(tmp_path, content):
    path = tmp_path / "empty.jsonl"
    path.write_text(content, encoding="utf-8")

    with pytest.raises(DataFormatError) as info:
        read_retrieval_jsonl(path)

    assert (info.value.path, info.value.record, info.value.field) == (str(path), None, None)
    assert str(info.value) == f"{path}: no items"


def test_text_kinds_select_a_variant_and_media_are_checked_together(tmp_path):
    import torch

    from vlr_plugins.data import RetrievalSet

    (tmp_path / "v0.mp4").write_bytes(b"")
    rs = RetrievalSet("care", ("v0", "v1", "v2"), ("g0", "s0", "g1", "t2", "s2"),
                      torch.tensor([0, 0, 1, 2, 2]), media=("v0.mp4", "v1.mp4", "v2.mp4"),
                      media_root=str(tmp_path), categories=("a", "b", "a"),
                      text_kinds=("general", "spatial", "general", "temporal", "spatial"))
    assert rs.kinds() == ["general", "spatial", "temporal"]
    spatial = rs.with_texts("spatial")
    assert spatial.item_ids == ("v0", "v2") and spatial.texts == ("s0", "s2")
    assert spatial.text_owner.tolist() == [0, 1] and spatial.categories == ("a", "a")
    assert spatial.media == ("v0.mp4", "v2.mp4")
    with pytest.raises(KeyError, match="no texts of kind 'event'"):
        rs.with_texts("event")
    with pytest.raises(FileNotFoundError) as e:
        rs.check_media()
    assert "2 of 3 media files are missing" in str(e.value) and "v1.mp4" in str(e.value) and "v2.mp4" in str(e.value)
    with pytest.raises(ValueError, match="categories must have 3 entries"):
        RetrievalSet("x", ("a", "b", "c"), ("t",), torch.tensor([0]), categories=("a",))
