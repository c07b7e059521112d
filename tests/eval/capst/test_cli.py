"""`vlr capst`: from a captions file and CaReBench's metadata.json to the Table 2 report, via a loopback judge."""

from __future__ import annotations

import ast
import json

import pytest

pytest.importorskip("openai")

from _fake_openai import FakeOpenAI  # noqa: E402




KEY = "sk-cli-judge-key-9876543210"


def _between(text, start, end):
    return text.split(start, 1)[1].split(end, 1)[0]


def judge(body):
    """Every caption has one event ("a dog runs") and one object ("there is a dog"); the
    judge calls an element entailed when the description mentions a dog."""
    content = body["messages"][0]["content"]
    if content.startswith("Below is a description of a video clip:"):
        kind = "events" if "key events" in content else "objects"
        return str({kind: ["a dog runs"] if kind == "events" else ["there is a dog"]})
    kind = "events" if "\nEvents: " in content else "objects"
    description = _between(content, "Video Description:\n", "\n\n")
    elements = ast.literal_eval(_between(content, f"{kind.title()}: ", "\nOutput a JSON"))
    verdict = "entailment" if "dog" in description else "neutral"
    return json.dumps({kind: [{kind[:-1]: e, "relationship": verdict, "reason": "-"} for e in elements]})


def _inputs(tmp_path):
    records = [{"video": f"v{i}.mp4", "caption": "A dog runs on grass.", "spatial_caption": "a dog",
                "temporal_caption": "it runs", "category": "animals"} for i in range(3)]
    (tmp_path / "metadata.json").write_text(json.dumps(records))
    captions = {"v0": "A dog runs fast.", "v1": "A cat sleeps.", "v2": "A brown dog on grass."}
    (tmp_path / "mine.jsonl").write_text("".join(json.dumps({"id": k, "caption": v}) + "\n"
                                                 for k, v in captions.items()))
    return tmp_path / "mine.jsonl", tmp_path / "metadata.json"


def test_vlr_capst_writes_the_table_and_never_the_key(tmp_path, monkeypatch, capsys):
    from vlr_plugins.cli import main

    captions, annotations = _inputs(tmp_path)
    monkeypatch.setenv("CLI_JUDGE_KEY", KEY)
    with FakeOpenAI(judge) as server:
        code = main(["capst", "--captions", str(captions), "--annotations", str(annotations),
                     "--judge-url", server.url, "--judge-model", "judge-x", "--judge-key-env", "CLI_JUDGE_KEY",
                     "--out", str(tmp_path / "out")])
        calls = len(server.requests)
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads((tmp_path / "out" / "capst.json").read_text())
    # recall: the reference's dog elements are entailed by v0 and v2, not v1 -> 2/3; precision:
    # the predictions' elements are entailed by the dog reference for every video -> 1 (percent)
    overall = result["scores"]["overall"]
    recall, precision = 100 * 2 / 3, 100.0
    assert overall["action"]["recall"] == pytest.approx(recall) and overall["action"]["precision"] == precision
    assert overall["object"]["f1"] == pytest.approx(2 * recall * precision / (recall + precision))
    assert "| mine |" in out and "capst.json" in out
    assert calls > 0 and KEY not in out + err
    assert all(KEY not in p.read_text() for p in (tmp_path / "out").iterdir() if p.suffix in (".json", ".md"))
    # a rerun is answered from the cache
    with FakeOpenAI(judge) as server:
        assert main(["capst", "--captions", str(captions), "--annotations", str(annotations),
                     "--judge-url", server.url, "--judge-model", "judge-x", "--judge-key-env", "CLI_JUDGE_KEY",
                     "--out", str(tmp_path / "out")]) == 0
        assert server.requests == []


def test_a_partial_run_writes_the_report_and_exits_1_naming_the_failures(tmp_path, monkeypatch, capsys):
    """The judge fails every request about one caption: the other videos are scored and
    reported, the console names the report files (not the table pasted where a path goes),
    and one error line says how many failed and why, with exit status 1."""
    from _fake_openai import error

    from vlr_plugins.cli import main

    captions, annotations = _inputs(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")

    def flaky(body):
        return error(500, "the judge is down") if "cat sleeps" in json.dumps(body) else judge(body)

    with FakeOpenAI(flaky) as server:
        code = main(["capst", "--captions", str(captions), "--annotations", str(annotations), "--judge-url",
                     server.url, "--judge-model", "judge-x", "--max-retries", "0", "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 1, err
    md = tmp_path / "out" / "capst.md"
    assert f"results: {md}, {tmp_path / 'out' / 'capst.json'}" in out
    results_line = next(line for line in out.splitlines() if line.startswith("results:"))
    assert "|" not in results_line
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors == [f"error: 1 of 3 videos failed and were not scored (the first: video 'v1', extracting events "
                      f"from the prediction: HTTP 500: the judge is down (after 1 calls)); {md} lists every failure"]
    result = json.loads((tmp_path / "out" / "capst.json").read_text())
    assert result["scored"] == 2 and [f["id"] for f in result["failed"]] == ["v1"]
    assert "- `v1`: extracting events from the prediction: HTTP 500" in md.read_text()


def test_max_tokens_bounds_every_judge_answer_and_is_recorded(tmp_path, monkeypatch):
    """`--max-tokens N` goes with every request (an endpoint's own limit may be long: `transformers
    serve` generates up to 1,024 new tokens) and into the report's judge settings."""
    from vlr_plugins.cli import main

    captions, annotations = _inputs(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
    with FakeOpenAI(judge) as server:
        assert main(["capst", "--captions", str(captions), "--annotations", str(annotations), "--judge-url",
                     server.url, "--judge-model", "judge-x", "--max-tokens", "7", "--out", str(tmp_path / "out")]) == 0
        bodies = server.bodies()
    assert bodies and all(b["max_tokens"] == 7 for b in bodies)
    assert json.loads((tmp_path / "out" / "capst.json").read_text())["judge"]["sampling"]["max_tokens"] == 7
