"""CapST inputs: a captions JSONL, and CaReBench's metadata.json with its optional
reference events and objects."""

from __future__ import annotations

import json

import pytest

from vlr_plugins.errors import DataFormatError
from vlr_plugins.eval.capst import CapstReference, read_captions_jsonl, read_carebench_references


def record(video, caption="A man runs.", category="sports & exercise", **extra):
    return {"video": video, "caption": caption, "spatial_caption": f"spatial {video}",
            "temporal_caption": f"temporal {video}", "category": category, **extra}


def write_json(tmp_path, records):
    path = tmp_path / "metadata.json"
    path.write_text(json.dumps(records))
    return path


def write_lines(tmp_path, lines):
    path = tmp_path / "captions.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_captions_by_id(tmp_path):
    path = write_lines(tmp_path, ['{"id": "v_1", "caption": "A dog."}', "",
                                  '{"id": 7, "caption": "", "model": "x"}'])
    assert read_captions_jsonl(path) == {"v_1": "A dog.", "7": ""}


@pytest.mark.parametrize("lines, where, problem", [
    (['{"id": "a", "caption": "x"}', '{"id": "a", "caption": "y"}'], "line 2, field 'id'",
     "duplicate id 'a', first on line 1"),
    (['{"caption": "x"}'], "line 1, field 'id'", "expected a non-empty string, found null"),
    (['{"id": "a", "caption": 3}'], "line 1, field 'caption'", "expected a string, found int"),
    (['["a", "x"]'], "line 1", "expected an object, found list"),
])
def test_caption_errors_name_line_and_field(tmp_path, lines, where, problem):
    with pytest.raises(DataFormatError) as info:
        read_captions_jsonl(write_lines(tmp_path, lines))
    assert where in str(info.value) and problem in str(info.value)


def test_an_empty_captions_file_is_an_error(tmp_path):
    with pytest.raises(DataFormatError, match="found none"):
        read_captions_jsonl(write_lines(tmp_path, [""]))


def test_references_with_and_without_element_lists(tmp_path):
    path = write_json(tmp_path, [
        record("v_1.mp4", caption="A woman brushes her hair.", category="personal care"),
        record("v_2.mp4", events=["a man runs", " "], objects=[]),
        record("v_3.mp4", caption=["Part one.", "Part two."]),
    ])
    refs = read_carebench_references(path)
    assert refs == [
        CapstReference(id="v_1", caption="A woman brushes her hair.", category="personal care",
                       spatial="spatial v_1.mp4", temporal="temporal v_1.mp4"),
        CapstReference(id="v_2", caption="A man runs.", category="sports & exercise", events=("a man runs",),
                       objects=(), spatial="spatial v_2.mp4", temporal="temporal v_2.mp4"),
        CapstReference(id="v_3", caption="Part one. Part two.", category="sports & exercise",
                       spatial="spatial v_3.mp4", temporal="temporal v_3.mp4"),
    ]


def test_the_category_key_is_the_readers(tmp_path):
    path = write_json(tmp_path, [record("a.mp4", category=None, major="household activities")])
    assert read_carebench_references(path)[0].category is None
    assert read_carebench_references(path, category_field="major")[0].category == "household activities"


@pytest.mark.parametrize("extra, where, problem", [
    ({"events": "a man runs"}, "field 'events'", "expected a list of strings, found str"),
    ({"objects": ["There is a cup.", 3]}, "field 'objects[1]'", "expected a string, found int"),
])
def test_bad_element_lists_name_record_and_field(tmp_path, extra, where, problem):
    path = write_json(tmp_path, [record("a.mp4"), record("b.mp4", **extra)])
    with pytest.raises(DataFormatError) as info:
        read_carebench_references(path)
    assert "record 1" in str(info.value) and where in str(info.value) and problem in str(info.value)
