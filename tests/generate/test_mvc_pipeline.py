"""The mvc pipeline end to end against a loopback server: S1 S2 D1 D2 from two captioners
(one sent sampled frames, one the video's file URL), D1* D2* refined with the thinking
removed, P1 P2 from one refined caption drawn per record; failures kept per view."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("openai")
pytest.importorskip("av")

from _fake_openai import FakeOpenAI
from _scripted_models import MVCModels, write_video

from vlr_plugins.generate.audit import corpus_audit
from vlr_plugins.generate.pipeline import load_pipeline
from vlr_plugins.generate.runner import generate_corpus

Q, T = "Qwen3-VL-30B-A3B-Instruct", "Tarsier2-Recap-7b"


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
    write_video(tmp_path / "good.mp4")
    write_video(tmp_path / "bad.mp4")
    (tmp_path / "broken.mp4").write_bytes(b"\x00" * 64)  # there, but no video: frames cannot be read
    items = [{"id": "v0", "video": "good.mp4", "caption": "a man walks"},
             {"id": "v1", "video": "bad.mp4", "caption": "a man on a shore"},
             {"id": "v2", "video": "broken.mp4", "caption": "a person"}]
    path = tmp_path / "videos.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in items), encoding="utf-8")
    return path


def run(inputs, out):
    with FakeOpenAI(MVCModels()) as server:
        role = {"base_url": server.url, "backoff": 0.01, "max_backoff": 0.02, "max_retries": 1}
        pipeline = load_pipeline("mvc", {
            "roles": {"captioner_1": role, "captioner_2": {**role, "video_transport": "file_url"}, "refiner": role},
            "frames": {"num_frames": 4, "strategy": "uniform"}, "records_per_part": 2})
        result = generate_corpus(pipeline, inputs, out)
    return result, server


def test_records_field_by_field(inputs, tmp_path):
    out = tmp_path / "mvc"
    result, server = run(inputs, out)
    assert result["complete"]
    # the bad and the broken video carry failures (kept in the corpus); the good one none
    assert result["failed_records"] == 2 and result["records_run"] == 3
    assert (result["first_failure"]["id"], result["first_failure"]["stage"]) == ("v1", "caption-2")  # part 0 first
    written = [json.loads(line) for line in (out / "corpus.jsonl").read_text().splitlines()]
    # on disk: the views at the top, the audit keys under meta (which the MVC reader ignores)
    for r in written:
        assert list(r) == ["id", "video", "O", "S1", "S2", "D1", "D2", "D1*", "D2*", "P1", "P2", "meta"]
        assert list(r["meta"]) == ["P_from", "frames", "failures", "generated_by"]
    good, bad, broken = [{**{k: v for k, v in r.items() if k != "meta"}, **r["meta"]} for r in written]

    assert good["video"] == str(tmp_path / "good.mp4") and good["O"] == "a man walks"
    assert good["frames"] == {"num_frames": 4, "strategy": "uniform"}
    assert good["S1"] == f"A person walks ({Q}, 4 frames)."
    assert good["S2"] == f"A person walks ({T}, good.mp4)."  # the file URL, not frames
    assert good["D1"] == f"A person in a red shirt walks along the rocky shore ({Q}, 4 frames)."
    assert good["D2"] == f"A person in a red shirt walks along the rocky shore ({T}, good.mp4)."
    # refined: the thinking gone; the Qwen caption corrected, the Tarsier one kept as it was
    assert good["D1*"] == good["D1"].replace("red", "blue") and good["D2*"] == good["D2"]
    source = "Qwen" if good["P_from"] == "D1*" else "Tarsier"
    assert good["P_from"] in ("D1*", "D2*")
    assert (good["P1"], good["P2"]) == (f"A person walks along the shore ({source}).",
                                        f"A person looks at the sea ({source}).")
    assert good["failures"] == []
    assert good["generated_by"] == {"S1": f"Qwen/{Q}", "D1": f"Qwen/{Q}", "S2": f"omni-research/{T}",
                                    "D2": f"omni-research/{T}", "D1*": "Qwen/Qwen3-VL-8B-Thinking",
                                    "D2*": "Qwen/Qwen3-VL-8B-Thinking", "P1": "Qwen/Qwen3-VL-8B-Thinking",
                                    "P2": "Qwen/Qwen3-VL-8B-Thinking"}

    # an empty detailed caption, however often asked: D2 and D2* null, the failure kept;
    # the positives come from the refined caption there is
    assert bad["D2"] is None and bad["D2*"] is None and bad["D1*"] is not None
    assert bad["P_from"] == "D1*" and bad["P1"].endswith("(Qwen).")
    [failure] = bad["failures"]
    assert (failure["stage"], failure["prompt"]) == ("caption-2", "detailed_2")
    assert failure["error"] == "malformed answer after 3 tries: the caption is empty" and failure["answer"] == ""

    # a file that does not decode: every request that sends frames fails alone; the file URL is sent
    assert broken["S1"] is None and broken["D1"] is None and broken["D1*"] is None and broken["D2*"] is None
    assert broken["S2"] == f"A person walks ({T}, broken.mp4)."
    assert [(f["stage"], f["prompt"]) for f in broken["failures"]] == [
        ("caption-1", "summary_1"), ("caption-1", "detailed_1"), ("refine", "refine"), ("positives", "positives")]
    assert "cannot read the request's media" in broken["failures"][0]["error"]
    assert broken["failures"][3]["error"].startswith("no refined caption")

    # the frames go as 4 JPEG data URLs before the prompt's text (Qwen's order)
    qwen = [b for b in server.bodies() if b["model"] == f"Qwen/{Q}"]
    content = qwen[0]["messages"][0]["content"]
    assert [p["type"] for p in content] == ["image_url"] * 4 + ["text"]
    assert content[0]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    refiner = [b for b in server.bodies() if b["model"] == "Qwen/Qwen3-VL-8B-Thinking"]
    assert all((b["temperature"], b["top_p"], b["extra_body"]["top_k"] if "extra_body" in b else b.get("top_k"))
               == (0.6, 0.95, 20) for b in refiner)


def test_the_audit_of_the_corpus(inputs, tmp_path):
    out = tmp_path / "mvc"
    run(inputs, out)
    audit = corpus_audit(out)
    assert audit["views"]["S1"]["n"] == 2 and audit["views"]["D2"]["n"] == 2
    # D2 -> D2*: one pair, unchanged; D1 -> D1*: two pairs, "red" -> "blue" each
    assert audit["refinement"]["D2->D2*"] == {"pairs": 1, "jaccard": 1.0, "exact_match_rate": 1.0}
    d1 = audit["refinement"]["D1->D1*"]
    assert d1["pairs"] == 2 and d1["exact_match_rate"] == 0.0
    # {person, red|blue, shirt, walks, rocky, shore, qwen3, vl, 30b, a3b, instruct, 4, frames}: 12 of 14
    assert d1["jaccard"] == pytest.approx(12 / 14)


def test_the_same_corpus_twice(inputs, tmp_path):
    run(inputs, tmp_path / "a")
    run(inputs, tmp_path / "b")
    assert (tmp_path / "a" / "corpus.jsonl").read_bytes() == (tmp_path / "b" / "corpus.jsonl").read_bytes()


def test_the_mvc_training_reader_reads_the_corpus_unchanged(inputs, tmp_path):
    mvc_samples = pytest.importorskip("vlr_plugins.data.mvc_samples")  # the MVC corpus reader, when it is there
    out = tmp_path / "mvc"
    run(inputs, out)
    samples = mvc_samples.read_mvc_samples(out / "corpus.jsonl")
    written = [json.loads(line) for line in (out / "corpus.jsonl").read_text().splitlines()]
    assert [s.id for s in samples] == [r["id"] for r in written]
    for s, r in zip(samples, written):
        assert s.video == r["video"]
        assert dict(s.captions) == {v: r[v] for v in ("O", "S1", "S2", "D1", "D2", "D1*", "D2*", "P1", "P2")
                                    if r[v] is not None}
