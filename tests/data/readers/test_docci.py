"""read_docci: all four splits by default, one description per image, errors by line."""

from __future__ import annotations

import json

import pytest

from vlr_plugins.data.readers import read_docci
from vlr_plugins.errors import DataFormatError
from vlr_plugins.registry import READERS


def line(example_id, split, description="A close-up view of a ..."):
    # the released file also carries these extra keys in some records; the reader ignores them
    return json.dumps(
        {
            "example_id": example_id,
            "split": split,
            "image_file": f"{example_id}.jpg",
            "description": description,
            "cluster_id": "c1",
        }
    )


LINES = [
    line("test_00001", "test"),
    line("train_00001", "train", "A brown dog on a couch."),
    line("qual_dev_00001", "qual_dev"),
    line("qual_test_00001", "qual_test"),
    line("train_00002", "train", "Two mugs on a wooden table."),
]


def write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_all_splits_by_default(tmp_path):
    rs = read_docci(write(tmp_path / "docci_descriptions.jsonlines", [*LINES[:2], "", *LINES[2:]]))

    assert rs.name == "docci"
    assert rs.item_ids == (
        "test_00001",
        "train_00001",
        "qual_dev_00001",
        "qual_test_00001",
        "train_00002",
    )
    assert rs.media == tuple(f"{i}.jpg" for i in rs.item_ids)
    assert rs.text_owner.tolist() == [0, 1, 2, 3, 4]
    assert rs.texts_of(4) == ["Two mugs on a wooden table."]


@pytest.mark.parametrize(
    ("splits", "name", "ids"),
    [
        (("train",), "docci-train", ("train_00001", "train_00002")),
        ("qual_dev", "docci-qual_dev", ("qual_dev_00001",)),
        (("test", "qual_test"), "docci-test+qual_test", ("test_00001", "qual_test_00001")),
    ],
)
def test_split_selection(tmp_path, splits, name, ids):
    rs = read_docci(write(tmp_path / "docci_descriptions.jsonlines", LINES), splits=splits)
    assert (rs.name, rs.item_ids) == (name, ids)


def test_unknown_split_requested(tmp_path):
    with pytest.raises(ValueError, match="splits must be some of"):
        read_docci(write(tmp_path / "d.jsonlines", LINES), splits=("dev",))


@pytest.mark.parametrize(
    ("bad", "where", "problem"),
    [
        ('{"example_id": "train_00003", "split": ', "line 3", "invalid JSON"),
        (
            json.dumps({"example_id": "train_00003", "split": "train", "image_file": "x.jpg"}),
            "line 3, field 'description'",
            "found null",
        ),
        (line("train_00003", "validation"), "line 3, field 'split'", 'found "validation"'),
        (line("train_00001", "train"), "line 3, field 'example_id'", "first on line 2"),
        ("[1, 2]", "line 3", "expected an object, found list"),
    ],
)
def test_errors_name_line_and_field(tmp_path, bad, where, problem):
    path = write(tmp_path / "docci_descriptions.jsonlines", [LINES[0], LINES[1], bad, *LINES[2:]])

    with pytest.raises(DataFormatError) as err:
        read_docci(path, splits=("test",))  # every line is validated, kept or not
    assert str(err.value).startswith(f"{path}, {where}: ")
    assert problem in str(err.value)


def test_missing_images_reported_at_once(tmp_path):
    root = tmp_path / "images"
    root.mkdir()
    (root / "train_00001.jpg").write_bytes(b"jpg")

    with pytest.raises(FileNotFoundError) as err:
        read_docci(write(tmp_path / "d.jsonlines", LINES), media_root=root, check_media=True)
    assert "4 of 5 media files are missing" in str(err.value)
    for name in ("test_00001.jpg", "qual_dev_00001.jpg", "qual_test_00001.jpg", "train_00002.jpg"):
        assert name in str(err.value)


def test_registered_by_name():
    assert READERS.get("docci") is read_docci
