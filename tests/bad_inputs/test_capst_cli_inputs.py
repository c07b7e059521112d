"""The bad-input catalogue for `vlr capst`: refused before any judge is called, naming the place."""

from __future__ import annotations

import json

import pytest
from _refusal import assert_refused, run_vlr

pytest.importorskip("openai")

from _fake_openai import FakeOpenAI, Reply, error, raw  # noqa: E402


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
    (lambda t, c, m: ["--captions", c, "--annotations", m, "--max-tokens", "0"], ["--max-tokens"]),
    (lambda t, c, m: ["--captions", c, "--annotations", m, "--retrieval", t / "r.json"], ["--retrieval", "r.json"]),
    (lambda t, c, m: ["--captions", c, "--annotations", m, "--out", c], ["--out", "caps.jsonl"]),
    (lambda t, c, m: [_write(t / "bad.jsonl", '{"id": "v0"\n'), "--annotations", m], ["bad.jsonl", "line 1"]),
    (lambda t, c, m: [_write(t / "two.jsonl", '{"id": "v0", "caption": 3}\n'), "--annotations", m],
     ["two.jsonl", "line 1", "caption"]),
    (lambda t, c, m: ["--captions", c, "--annotations", _write(t / "meta.json", "[{]")], ["meta.json"]),
], ids=["no-captions", "no-annotations", "benchmark", "concurrency", "timeout", "max-tokens", "retrieval",
        "out-is-a-file",
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


# ---------------------------------------------------------------- a judge that answers nothing usable

def _extraction(body):
    return body["messages"][0]["content"].startswith("Below is a description of a video clip:")


def _wrong_count(body):
    """Extraction answers well; every judgement labels one element too many."""
    content = body["messages"][0]["content"]
    if _extraction(body):
        kind = "events" if "key events" in content else "objects"
        return json.dumps({kind: ["a dog runs"]})
    kind = "events" if "\nEvents: " in content else "objects"
    return json.dumps({kind: [{"relationship": "entailment"}] * 2})


FAILING_JUDGES = {
    # (script or None for a closed port, what the error line names, whether answers were received)
    "unreachable": (None, "connection failed", False),
    "http-500": (lambda body: error(500, "the judge is down"), "HTTP 500: the judge is down", False),
    "hanging": (lambda body: Reply(content="{}", delay=3), "timed out", False),
    "answer-not-json": (lambda body: "I think the events are a dog running.", "malformed answer", True),
    "wrong-number-of-labels": (_wrong_count, 'expected 1 entries in "events"', True),
    "body-not-json": (lambda body: raw('{"id": "chatcmpl-1", "choi'), "not a chat completion: not JSON", False),
    "html-page": (lambda body: raw("<html>Bad gateway</html>", content_type="text/html"),
                  "not a chat completion", False),
}


@pytest.fixture
def judged(tmp_path, monkeypatch):
    """One CaReBench video with everything the reader needs, and its caption: only the judge can fail."""
    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
    meta = tmp_path / "metadata.json"
    meta.write_text(json.dumps([{"video": "v0.mp4", "caption": "A dog runs.", "spatial_caption": "a dog",
                                 "temporal_caption": "it runs", "category": "animals"}]))
    caps = tmp_path / "caps.jsonl"
    caps.write_text(json.dumps({"id": "v0", "caption": "A dog."}) + "\n")
    return tmp_path, caps, meta


def run_against(case, tmp_path, caps, meta):
    script, _, _ = FAILING_JUDGES[case]
    argv = ["capst", "--captions", caps, "--annotations", meta, "--judge-model", "m", "--max-retries", "0",
            "--reasks", "0", "--timeout", "1", "--out", tmp_path / "vlr-capst"]
    if script is None:
        return run_vlr([*argv, "--judge-url", "http://127.0.0.1:9/v1"], cwd=tmp_path)
    with FakeOpenAI(script) as server:
        return run_vlr([*argv, "--judge-url", server.url], cwd=tmp_path)


@pytest.mark.parametrize("case", list(FAILING_JUDGES))
def test_a_run_where_every_video_failed_is_an_error_and_writes_nothing(judged, case):
    """Exit 2 and one error line with the count and the first error (it used to exit 0 with a
    table of dashes; a body that is not JSON was a JSONDecodeError traceback); no report, and
    no llm-cache.sqlite unless the judge answered something."""
    tmp_path, caps, meta = judged
    code, out, err = run_against(case, tmp_path, caps, meta)
    _, named, answered = FAILING_JUDGES[case]
    shown = f"\nstdout:\n{out}\nstderr:\n{err}"
    assert code == 2 and "Traceback" not in err, shown
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and err.splitlines()[-1] == errors[0], shown
    assert errors[0].startswith("error: 1 video failed, none was scored (the first: video 'v0', ")
    assert named in errors[0]
    assert "no report was written" in errors[0]
    left = sorted(p.name for p in (tmp_path / "vlr-capst").iterdir()) if (tmp_path / "vlr-capst").exists() else []
    assert left == (["llm-cache.sqlite"] if answered else []), shown
    assert ("kept in" in errors[0]) == answered
