"""The paragraph pipeline end to end against a loopback OpenAI-compatible server: the
records field by field, the regeneration rule (score <= 5, up to 3 attempts, best kept),
parse failures kept in the record, a 429 and a dropped connection retried, and the
corpus read back by the training reader unchanged."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("openai")

from _fake_openai import FakeOpenAI
from _scripted_models import ParagraphModels, write_images

from vlr_plugins.data import read_paragraph_samples
from vlr_plugins.generate.pipeline import load_pipeline
from vlr_plugins.generate.runner import generate_corpus

CAPTIONS = ["a red bus", "two cats", "a bowl of soup", "a kite"]


def fast_roles(url: str) -> dict:
    role = {"base_url": url, "backoff": 0.01, "max_backoff": 0.02, "concurrency": 4}
    return {"roles": {"captioner": role, "judge": role}, "records_per_part": 2}


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
    records = write_images(tmp_path / "images", CAPTIONS)
    path = tmp_path / "images" / "items.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def run(inputs, out, models=None):
    models = models or ParagraphModels()
    with FakeOpenAI(models) as server:
        pipeline = load_pipeline("paragraph", fast_roles(server.url))
        result = generate_corpus(pipeline, inputs, out)
    return result, server


def corpus(out):
    return [json.loads(line) for line in (out / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]


def test_records_field_by_field(inputs, tmp_path):
    out = tmp_path / "corpus"
    result, server = run(inputs, out)
    assert result["complete"] and result["records"] == 4 and result["parts"] == 2
    bus, cats, soup, kite = corpus(out)
    images = inputs.parent

    assert list(bus)[:10] == ["id", "caption", "image", "positives", "hard_negatives", "paragraph", "score",
                              "attempts", "failures", "generated_by"]
    assert bus["id"] == "r0" and bus["caption"] == "a red bus" and bus["image"] == str(images / "img0.png")
    # one item, asked again: five, with the preamble, bold and closing remark gone
    assert bus["positives"] == [f"A red bus, view {i}." for i in range(1, 6)]
    assert bus["hard_negatives"] == [f"Not a red bus, variant {i}." for i in range(1, 6)]
    # 3 (<= 5) -> regenerated -> 7 -> kept; no third attempt
    assert [(a["attempt"], a["score"], a["score_answer"]) for a in bus["attempts"]] == [
        (1, 3, "3"), (2, 7, "I would rate it 7/10.")]
    assert bus["paragraph"] == "A photo of a red bus, take 2." and bus["score"] == 7
    assert bus["failures"] == []
    assert bus["generated_by"] == {"positives": "Qwen/Qwen2-VL-7B-Instruct",
                                   "hard_negatives": "Qwen/Qwen2-VL-7B-Instruct",
                                   "paragraph": "Qwen/Qwen2-VL-7B-Instruct",
                                   "score": "meta-llama/Llama-3.2-11B-Vision-Instruct"}

    # a 429 on the judge and a dropped connection on the negatives: retried, nothing lost
    assert cats["hard_negatives"] == [f"Not two cats, variant {i}." for i in range(1, 6)]
    assert [(a["attempt"], a["score"]) for a in cats["attempts"]] == [(1, 9)] and cats["failures"] == []

    # a score of exactly 5 is regenerated (the appendix's <= 5); the best of three is kept
    assert [a["score"] for a in soup["attempts"]] == [5, 2, 4]
    assert soup["paragraph"] == "A photo of a bowl of soup, take 1." and soup["score"] == 5

    # four items however often asked, and a score without a number: failures kept, not dropped
    assert kite["positives"] == []
    stages = [(f["stage"], f["prompt"], f.get("attempt")) for f in kite["failures"]]
    assert stages == [("texts", "positives", None), ("score-1", "score", 1)]
    assert kite["failures"][0]["error"] == "malformed answer after 3 tries: expected 5 captions, found 4"
    assert kite["failures"][0]["answer"].startswith("1. A kite flies.")
    assert kite["failures"][1]["answer"] == "I cannot judge this."
    # the unscored attempt did not count as good: a second one was made, and scored
    assert [(a["score"], a["score_answer"]) for a in kite["attempts"]] == [(None, "I cannot judge this."), (8, "8")]
    assert kite["paragraph"] == "A photo of a kite, take 2." and kite["score"] == 8

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["records"] == 4
    assert manifest["failures"] == {"score-1/score": 1, "texts/positives": 1}


def test_requests_carry_the_papers_sampling_and_per_record_seeds(inputs, tmp_path):
    _, server = run(inputs, tmp_path / "corpus")
    by_prompt: dict[str, list[dict]] = {}
    for body in server.bodies():
        user = [m for m in body["messages"] if m["role"] == "user"][0]["content"]
        text = user[-1]["text"]
        name = ("score" if text.startswith("You are") else "positives" if text.startswith("Using the given")
                else "hard_negatives" if text.startswith("The original") else "paragraph")
        by_prompt.setdefault(name, []).append(body)
        assert user[0]["type"] == "image_url" and user[0]["image_url"]["url"].startswith("data:image/png;base64,")
    for name, tokens in (("positives", 160), ("hard_negatives", 200), ("paragraph", 200)):
        for body in by_prompt[name]:
            assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.7, 0.9, tokens)
            assert body["messages"][0]["role"] == "system"
            assert "Original caption: " in body["messages"][0]["content"]
    for body in by_prompt["score"]:
        assert body["temperature"] == 0.0 and body["max_tokens"] == 16 and "top_p" not in body
    # each paragraph attempt of a record has its own seed; the same in every run
    seeds = [b["seed"] for b in by_prompt["paragraph"] if "a red bus" in b["messages"][0]["content"]]
    assert len(set(seeds)) == 2
    _, again = run(inputs, tmp_path / "corpus-2")
    assert sorted(b["seed"] for b in again.bodies()) == sorted(b["seed"] for b in server.bodies())


def test_training_reader_reads_the_corpus_unchanged(inputs, tmp_path):
    out = tmp_path / "corpus"
    run(inputs, out)
    samples = read_paragraph_samples(out / "corpus.jsonl", media_key="image")
    raw = corpus(out)
    assert [s.id for s in samples] == [r["id"] for r in raw]
    for s, r in zip(samples, raw):
        assert s.caption == r["caption"] and list(s.positives) == r["positives"]
        assert list(s.hard_negatives) == r["hard_negatives"]
        assert s.paragraph == r["paragraph"] and s.score == r["score"] and str(s.media) == r["image"]


def test_a_rerun_of_a_finished_corpus_asks_nothing(inputs, tmp_path):
    out = tmp_path / "corpus"
    run(inputs, out)
    before = (out / "corpus.jsonl").read_bytes()
    result, server = run(inputs, out)
    assert server.requests == [] and result["parts_run"] == 0 and result["complete"]
    assert (out / "corpus.jsonl").read_bytes() == before
