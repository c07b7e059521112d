"""Running a pipeline at scale: kill -9 at any point and rerun gives the same corpus with
nothing lost or twice; job-array shards give the same corpus as one worker; stages run
one at a time (as on different machines) give it too; a rerun of another pipeline or
input into the same folder is refused."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("openai")

from _fake_openai import FakeOpenAI, answer
from _scripted_models import ParagraphModels, write_images

from vlr_plugins.errors import UserError
from vlr_plugins.generate.pipeline import load_pipeline
from vlr_plugins.generate.runner import generate_corpus

CAPTIONS = ["a red bus", "two cats", "a bowl of soup", "a kite", "a green tree", "a boat", "a city at night"]
SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")


def overrides(url: str, per_part: int = 2, concurrency: int = 4) -> dict:
    role = {"base_url": url, "backoff": 0.01, "max_backoff": 0.02, "concurrency": concurrency}
    return {"roles": {"captioner": role, "judge": role}, "records_per_part": per_part}


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
    records = write_images(tmp_path / "images", CAPTIONS)
    path = tmp_path / "images" / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def reference(inputs, out, calls=None):
    with FakeOpenAI(ParagraphModels(glitches=False)) as server:
        generate_corpus(load_pipeline("paragraph", overrides(server.url)), inputs, out)
    if calls is not None:
        calls.append(len(server.requests))
    return (out / "corpus.jsonl").read_bytes()


def ids_of(data: bytes) -> list[str]:
    return [json.loads(line)["id"] for line in data.splitlines()]


def slow(models, delay):
    def script(body):
        reply = models(body)
        return answer(reply, delay) if isinstance(reply, str) else reply
    return script


WORKER = textwrap.dedent("""
    import json, sys
    from vlr_plugins.generate.pipeline import load_pipeline
    from vlr_plugins.generate.runner import generate_corpus
    url, inputs, out = sys.argv[1:4]
    role = {"base_url": url, "backoff": 0.01, "max_backoff": 0.02, "concurrency": 4}
    pipeline = load_pipeline("paragraph", {"roles": {"captioner": role, "judge": role}, "records_per_part": 2})
    generate_corpus(pipeline, inputs, out)
""")


@pytest.mark.parametrize("kill_after", [5, 23, 41])
def test_kill_9_then_rerun_gives_the_same_corpus(inputs, tmp_path, kill_after):
    calls: list[int] = []
    expected = reference(inputs, tmp_path / "reference", calls)
    out = tmp_path / "killed"
    script = tmp_path / "worker.py"
    script.write_text(WORKER, encoding="utf-8")
    models = ParagraphModels(glitches=False)  # one script for both runs: its answers go on where they stopped
    with FakeOpenAI(slow(models, 0.03)) as server:
        env = {**os.environ, "PYTHONPATH": os.path.abspath(SRC)}
        proc = subprocess.Popen([sys.executable, str(script), server.url, str(inputs), str(out)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while len(server.requests) < kill_after and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert proc.poll() is None, f"the worker ended before it was killed: {proc.stderr.read().decode()[-2000:]}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
        assert not (out / "corpus.jsonl").exists()
        asked_before = len(server.requests)
        result = generate_corpus(load_pipeline("paragraph", overrides(server.url)), inputs, out)
    got = (out / "corpus.jsonl").read_bytes()
    assert result["complete"]
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(expected).hexdigest()
    ids = ids_of(got)
    assert len(ids) == len(set(ids)) == len(CAPTIONS)
    # the rerun asked again only what the killed worker had not stored yet: the calls in
    # flight (4 at most, the concurrency) and answers received but not yet in the cache
    # (as many again); the rest came from the parts written and the cache
    assert asked_before >= kill_after
    assert calls[0] <= len(server.requests) <= calls[0] + 8
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["corpus"]["sha256"] == hashlib.sha256(expected).hexdigest()
    assert not list(out.rglob("*.tmp*"))


def test_job_array_shards_give_the_one_worker_corpus(inputs, tmp_path):
    expected = reference(inputs, tmp_path / "reference")
    out = tmp_path / "sharded"
    with FakeOpenAI(ParagraphModels(glitches=False)) as server:
        pipeline = load_pipeline("paragraph", overrides(server.url))
        first = generate_corpus(pipeline, inputs, out, shard_index=1, shard_count=3)
        assert not first["complete"] and first["manifest"] is None and not (out / "corpus.jsonl").exists()
        assert first["parts_run"] == 1  # parts 0..3: worker 1 of 3 owns part 1
        generate_corpus(pipeline, inputs, out, shard_index=0, shard_count=3)
        last = generate_corpus(pipeline, inputs, out, shard_index=2, shard_count=3)
    assert last["complete"] and (out / "corpus.jsonl").read_bytes() == expected
    progress = sorted(p.name for p in (out / "progress").iterdir())
    assert progress == [f"worker-0000{i}-of-00003.json" for i in range(3)]
    assert json.loads((out / "progress" / progress[0]).read_text())["records"] == 3  # parts 0 and 3: 2 + 1 records


def test_stages_run_one_at_a_time_as_on_different_machines(inputs, tmp_path):
    expected = reference(inputs, tmp_path / "reference")
    out = tmp_path / "staged"
    models = ParagraphModels(glitches=False)
    with FakeOpenAI(models) as server:
        pipeline = load_pipeline("paragraph", overrides(server.url))
        with pytest.raises(UserError, match="run stage texts first"):
            generate_corpus(pipeline, inputs, out, stages=["score-1"], cache=None)
        for stage in [s.name for s in pipeline.stages]:
            # no shared cache between stages: each reads only the stage before it from disk
            result = generate_corpus(pipeline, inputs, out, stages=[stage], cache=tmp_path / f"{stage}.sqlite")
    assert result["complete"] and (out / "corpus.jsonl").read_bytes() == expected


def test_a_folder_of_another_run_is_refused(inputs, tmp_path):
    out = tmp_path / "corpus"
    reference(inputs, out)
    with FakeOpenAI(ParagraphModels(glitches=False)) as server:
        other = load_pipeline("paragraph", {**overrides(server.url), "seed": 1})
        with pytest.raises(UserError, match="another pipeline"):
            generate_corpus(other, inputs, out)
        inputs.write_text(inputs.read_text().replace("a kite", "a big kite"), encoding="utf-8")
        with pytest.raises(UserError, match="another input file"):
            generate_corpus(load_pipeline("paragraph", overrides(server.url)), inputs, out)
    assert server.requests == []


def test_an_unreachable_endpoint_writes_no_part_of_failures(inputs, tmp_path):
    role = {"base_url": "http://127.0.0.1:9/v1", "max_retries": 1, "backoff": 0.01, "max_backoff": 0.02}
    pipeline = load_pipeline("paragraph", {"roles": {"captioner": role, "judge": role}, "records_per_part": 2})
    out = tmp_path / "corpus"
    with pytest.raises(UserError, match=r"stage texts, part 0: all 6 requests failed without an answer .*"
                                        r"connection failed.*check roles.captioner"):
        generate_corpus(pipeline, inputs, out)
    assert not (out / "stages" / "texts").exists() or not list((out / "stages" / "texts").iterdir())


def _judge_refuses(captions):
    """The paragraph models, with a judge that answers no score for the paragraphs of ``captions``."""
    models = ParagraphModels(glitches=False)

    def script(body):
        text = json.dumps(body)
        if "You are a strict evaluator" in text and any(f"A photo of {c}," in text for c in captions):
            return "I would rather not say."
        return models(body)
    return script


def test_a_stage_that_answers_nothing_usable_stops_at_its_first_part(inputs, tmp_path):
    """Every score malformed: the run stops at score-1's first part, naming the first error and
    the cache; the texts part already written stays for the rerun, score-1 has no part."""
    out = tmp_path / "corpus"
    with FakeOpenAI(_judge_refuses(CAPTIONS)) as server:
        with pytest.raises(UserError) as stopped:
            generate_corpus(load_pipeline("paragraph", overrides(server.url)), inputs, out)
    message = str(stopped.value)
    assert message.startswith("stage score-1, part 0: all 2 requests failed and no part of the stage is written "
                              "yet (the first: record 'r0', prompt score: malformed answer after 3 tries: ")
    assert "check roles.judge" in message and f"kept in {out / 'llm-cache.sqlite'}" in message
    assert (out / "stages" / "texts" / "part-000000.jsonl").exists()
    assert not (out / "stages" / "score-1").exists() or not list((out / "stages" / "score-1").iterdir())


def test_a_later_part_whose_every_request_failed_is_written_with_its_failures(inputs, tmp_path):
    """Once a stage has written parts it works: a part whose records all fail there is written
    with the failures (a bad part cannot keep the run from finishing), and counted."""
    out = tmp_path / "corpus"
    with FakeOpenAI(_judge_refuses(["a bowl of soup", "a kite"])) as server:  # part 1 of 4
        result = generate_corpus(load_pipeline("paragraph", overrides(server.url)), inputs, out)
    assert result["complete"] and result["records_run"] == len(CAPTIONS)
    records = {json.loads(line)["id"]: json.loads(line) for line in (out / "corpus.jsonl").read_text().splitlines()}
    failed = sorted(rid for rid, r in records.items() if r["failures"])
    assert failed == ["r2", "r3"] and result["failed_records"] == 2
    first = result["first_failure"]  # the first stage's first: the kite's four positives
    assert (first["id"], first["stage"], first["prompt"]) == ("r3", "texts", "positives")
    assert first["error"] == "malformed answer after 3 tries: expected 5 captions, found 4"
    assert [f["stage"] for f in records["r2"]["failures"]][:1] == ["score-1"]


def test_a_run_stopped_before_any_part_leaves_no_folder(inputs, tmp_path):
    role = {"base_url": "http://127.0.0.1:9/v1", "max_retries": 0}
    pipeline = load_pipeline("paragraph", {"roles": {"captioner": role, "judge": role}})
    out = tmp_path / "corpus"
    with pytest.raises(UserError, match="without an answer"):
        generate_corpus(pipeline, inputs, out)
    assert not out.exists()
    # a folder that was there (an earlier run's) keeps what it holds
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="without an answer"):
        generate_corpus(pipeline, inputs, out)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "pipeline.yaml", "run.json"]
