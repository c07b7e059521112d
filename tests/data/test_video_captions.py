"""(video, caption) JSON Lines for CaRe stage I: pairs, moments, and every bad record named by line and field."""

from __future__ import annotations

import json

import pytest

from vlr_plugins.data import VideoCaption, read_video_captions
from vlr_plugins.errors import DataFormatError
from vlr_plugins.registry import READERS


def write(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture
def videos(tmp_path):
    (tmp_path / "clips").mkdir()
    for name in ("a.mp4", "b.mp4"):
        (tmp_path / "clips" / name).write_bytes(b"")
    return tmp_path


def test_reads_pairs_with_paths_resolved_against_the_file(videos):
    path = write(videos / "caps.jsonl", [
        {"video": "clips/a.mp4", "caption": "A man slices a watermelon."},
        "",
        {"video": str(videos / "clips" / "b.mp4"), "caption": "A dog runs.", "start": 1, "end": 2.5, "id": 7},
    ])
    got = read_video_captions(path)
    assert got == [
        VideoCaption(str(videos / "clips" / "a.mp4"), "A man slices a watermelon.", None, None, None, 1),
        VideoCaption(str(videos / "clips" / "b.mp4"), "A dog runs.", 1.0, 2.5, "7", 3),
    ]
    assert READERS.get("video_captions") is read_video_captions


def test_video_root_resolves_relative_paths(videos, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("lists")
    path = write(elsewhere / "caps.jsonl", [{"video": "a.mp4", "caption": "x"}])
    assert read_video_captions(path, video_root=videos / "clips")[0].video == str(videos / "clips" / "a.mp4")


@pytest.mark.parametrize("record, field, problem", [
    ({"caption": "x"}, "video", "missing"),
    ({"video": 3, "caption": "x"}, "video", "expected the path"),
    ({"video": "clips/a.mp4"}, "caption", "missing"),
    ({"video": "clips/a.mp4", "caption": ["x"]}, "caption", "expected a string, found list"),
    ({"video": "clips/a.mp4", "caption": "  "}, "caption", "non-empty caption"),
    ({"video": "clips/a.mp4", "caption": "x", "captoin": "y"}, "captoin", "unknown field"),
    ({"video": "clips/a.mp4", "caption": "x", "start": "1"}, "start", "found str"),
    ({"video": "clips/a.mp4", "caption": "x", "start": -1}, "start", "found -1"),
    ({"video": "clips/a.mp4", "caption": "x", "start": 2, "end": 2}, "end", "after start"),
    ({"video": "clips/a.mp4", "caption": "x", "id": [1]}, "id", "found list"),
    ({"video": "clips/nope.mp4", "caption": "x"}, "video", "no such file"),
], ids=["no-video", "video-type", "no-caption", "caption-type", "empty-caption", "unknown-field", "start-type",
        "negative-start", "end-not-after-start", "id-type", "missing-video-file"])
def test_a_bad_record_is_named_by_file_line_and_field(videos, record, field, problem):
    path = write(videos / "caps.jsonl", [{"video": "clips/a.mp4", "caption": "fine"}, record])
    with pytest.raises(DataFormatError) as e:
        read_video_captions(path)
    assert (e.value.record, e.value.field) == (2, field)
    assert str(e.value).startswith(f"{path}, line 2, field {field!r}: ") and problem in str(e.value)


def test_files_are_not_checked_when_asked_not_to(videos):
    path = write(videos / "caps.jsonl", [{"video": "clips/nope.mp4", "caption": "x"}])
    assert read_video_captions(path, check_files=False)[0].video.endswith("nope.mp4")


@pytest.mark.parametrize("text, problem, line", [
    ("", "no records", None),
    ('["a"]\n', "expected a JSON object, found list", 1),
    ('{"video": \n', "invalid JSON", 1),
], ids=["empty", "not-an-object", "bad-json"])
def test_bad_files_are_named(tmp_path, text, problem, line):
    path = tmp_path / "caps.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataFormatError, match=problem) as e:
        read_video_captions(path)
    assert e.value.record == line


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(DataFormatError, match="no such file"):
        read_video_captions(tmp_path / "nope.jsonl")
