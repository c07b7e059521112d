"""The bad-input catalogue for `vlr capst`: refused before any judge is called, naming the place."""

from __future__ import annotations

import json

import pytest
from _refusal import assert_refused

pytest.importorskip("openai")


@pytest.fixture
def files(tmp_path):
    meta = tmp_path / "metadata.json"
    meta.write_text(json.dumps([{"video": "v0.mp4", "caption": "A dog runs.", "category": "animals"}]))
    caps = tmp_path / "caps.jsonl"
    caps.write_text(json.dumps({"id": "v0", "caption": "A dog."}) + "\n")
    return tmp_path, caps, meta


BASE = ["capst", "--judge-model", "m", "--judge-url", "http://127.0.0.1:9/v1"]


@pytest.mark.parametrize("change, where", [
    (lambda t, c, m: ["--captions", t / "nope.jsonl", "--annotations", m], ["--captions", "nope.jsonl"]),
    (lambda t, c, m: ["--captions", c, "--annotations", t / "nope.json"], ["--annotations", "nope.json"]),
    (lambda t, c, m: ["--captions", c, "--annotations", m, "--benchmark", "msrvtt"], ["--benchmark", "msrvtt"]),
    (lambda t, c, m: ["--captions", c, "--annotations", m, "--concurrency", "0"], ["--concurrency"]),
    (lambda t, c, m: ["--captions", c, "--annotations", m, "--timeout", "x"], ["--timeout"]),
    (lambda t, c, m: ["--captions", c, "--annotations", m, "--retrieval", t / "r.json"], ["--retrieval", "r.json"]),
    (lambda t, c, m: ["--captions", c, "--annotations", m, "--out", c], ["--out", "caps.jsonl"]),
    (lambda t, c, m: [_write(t / "bad.jsonl", '{"id": "v0"\n'), "--annotations", m], ["bad.jsonl", "line 1"]),
    (lambda t, c, m: [_write(t / "two.jsonl", '{"id": "v0", "caption": 3}\n'), "--annotations", m],
     ["two.jsonl", "line 1", "caption"]),
    (lambda t, c, m: ["--captions", c, "--annotations", _write(t / "meta.json", "[{]")], ["meta.json"]),
], ids=["no-captions", "no-annotations", "benchmark", "concurrency", "timeout", "retrieval", "out-is-a-file",
        "captions-not-json", "caption-not-text", "annotations-not-json"])
def test_capst_refuses_bad_input_before_calling_the_judge(files, change, where):
    tmp_path, caps, meta = files
    argv = [*BASE, *change(tmp_path, caps, meta)]
    if argv[len(BASE)] != "--captions":
        argv.insert(len(BASE), "--captions")
    assert_refused(argv, *where, leaves=[tmp_path / "vlr-capst"], cwd=tmp_path)


def _write(path, text):
    path.write_text(text)
    return path
