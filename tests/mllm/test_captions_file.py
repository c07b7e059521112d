"""CaptionsFile: captions appended one fsynced line at a time; a resume skips what is there,
cuts a killed run's partial line, and refuses other settings or a mixed-up file."""

from __future__ import annotations

import json

import pytest

from vlr_plugins.errors import DataFormatError, OutputExistsError, UsageError
from vlr_plugins.mllm.captions_file import CaptionsFile, settings_path_of

SETTINGS = {"model": "m", "prompt": "Describe the video in detail.", "generation": {"max_new_tokens": 8}}


def lines(path):
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def test_appends_and_resumes_where_it_stopped(tmp_path):
    path = tmp_path / "caps.jsonl"
    with CaptionsFile(path, SETTINGS) as f:
        f.append("v0", "a dog — runs")
        f.append("v1", "line\nbreak")
    assert lines(path) == [{"id": "v0", "caption": "a dog — runs"}, {"id": "v1", "caption": "line\nbreak"}]
    assert json.loads(settings_path_of(path).read_text()) == SETTINGS
    with CaptionsFile(path, SETTINGS, resume=True) as f:
        assert f.done == {"v0": "a dog — runs", "v1": "line\nbreak"} and not f.cut_partial_line
        with pytest.raises(ValueError, match="v1"):
            f.append("v1", "again")
        f.append("v2", "third")
    assert [r["id"] for r in lines(path)] == ["v0", "v1", "v2"]


def test_a_caption_with_a_unicode_line_separator_is_read_back(tmp_path):
    # json.dumps(ensure_ascii=False) writes U+2028 / U+0085 as they are; only "\n" ends a record
    path = tmp_path / "caps.jsonl"
    with CaptionsFile(path, SETTINGS) as f:
        f.append("v0", "a dog\u2028runs\x85on")
        f.append("v1", "second")
    with CaptionsFile(path, SETTINGS, resume=True) as f:
        assert f.done == {"v0": "a dog\u2028runs\x85on", "v1": "second"}


def test_a_killed_runs_partial_line_is_cut_off_and_captioned_again(tmp_path):
    path = tmp_path / "caps.jsonl"
    with CaptionsFile(path, SETTINGS) as f:
        f.append("v0", "first")
    with open(path, "ab") as raw:
        raw.write(b'{"id": "v1", "capt')  # what a kill in the middle of a write leaves
    with CaptionsFile(path, SETTINGS, resume=True) as f:
        assert f.cut_partial_line and set(f.done) == {"v0"}
        f.append("v1", "second")
    assert lines(path) == [{"id": "v0", "caption": "first"}, {"id": "v1", "caption": "second"}]


def test_refuses_to_mix_runs_or_to_clobber(tmp_path):
    path = tmp_path / "caps.jsonl"
    CaptionsFile(path, SETTINGS).close()
    with pytest.raises(OutputExistsError, match="--resume"):
        CaptionsFile(path, SETTINGS, resume_flag="--resume")
    other = {**SETTINGS, "generation": {"max_new_tokens": 9}}
    with pytest.raises(UsageError, match=r"generation\.max_new_tokens was 8, now 9"):
        CaptionsFile(path, other, resume=True)
    with pytest.raises(UsageError, match="exclude"):
        CaptionsFile(path, SETTINGS, resume=True, overwrite=True)
    with CaptionsFile(path, other, overwrite=True) as f:  # a new start: the old record goes too
        assert f.done == {}
    assert json.loads(settings_path_of(path).read_text()) == other
    with pytest.raises(OutputExistsError, match="folder"):
        CaptionsFile(tmp_path, SETTINGS)


def test_a_damaged_file_is_named_by_line(tmp_path):
    path = tmp_path / "caps.jsonl"
    path.write_text('{"id": "v0", "caption": "a"}\n{"id": "v0", "caption": "b"}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"duplicate id 'v0', first on line 1") as e:
        CaptionsFile(path, SETTINGS, resume=True)
    assert "caps.jsonl" in str(e.value)
    path.write_text('{"id": "v0", "caption": 3}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match="caption"):
        CaptionsFile(path, SETTINGS, resume=True)
