"""CapST end to end against a loopback judge: the requests made (and skipped), the prompts
sent, scores against a plain reference, failures reported rather than scored, free reruns."""

from __future__ import annotations

import ast
import json

import pytest

pytest.importorskip("openai")

from vlr_plugins.errors import ConfigError, UserError
from vlr_plugins.eval.capst import (
    CapstReference,
    evaluate_capst,
    extraction_messages,
    judgement_messages,
    read_carebench_references,
    run_capst,
)
from vlr_plugins.chat import ChatSettings, OpenAIChatClient




from _fake_openai import FakeOpenAI  # noqa: E402
KEY = "sk-capst-judge-key-0123456789"

REFERENCES = [
    # no element lists: both extracted from the caption
    CapstReference(id="v1", caption="A woman brushes her hair. She wears a red shirt.", category="personal care",
                   spatial="A woman in a red shirt.", temporal="A woman brushes her hair."),
    # element lists given by the annotation file: nothing extracted from the reference
    CapstReference(id="v2", caption="A man runs on a track and jumps over a hurdle under a blue sky.",
                   category="sports & exercise", events=("a man runs on a track", "a man jumps over a hurdle"),
                   objects=("there is a blue sky",)),
    # no reference event (recall scores 1.0, no call); objects extracted
    CapstReference(id="v3", caption="A boy stands next to a ball.", category="sports & exercise", events=()),
]
CAPTIONS = {"v1": "A woman combs her hair in a bathroom.",
            "v2": "A man runs on a track. The sky is blue and a dog watches.",
            "v3": "A still photo of a green field."}

# what the scripted judge extracts: (kind, caption as sent) -> elements
EXTRACTED = {
    ("events", "a woman brushes her hair. she wears a red shirt."): ["a woman brushes her hair"],
    ("objects", "a woman brushes her hair. she wears a red shirt."): ["there is a woman", "there is a red shirt"],
    ("events", "a woman combs her hair in a bathroom."): ["a woman combs her hair"],
    ("objects", "a woman combs her hair in a bathroom."): ["there is a woman", "there is a bathroom"],
    ("events", "a man runs on a track. the sky is blue and a dog watches."): ["a man runs on a track", "a dog watches"],
    ("objects", "a man runs on a track. the sky is blue and a dog watches."): ["there is a blue sky", "there is a dog"],
    ("objects", "a boy stands next to a ball."): ["there is a boy", "there is a ball"],
    ("events", "a still photo of a green field."): [],
    ("objects", "a still photo of a green field."): ["there is a green field"],
    # v1's Stage-II captions, for split_references
    ("events", "a woman brushes her hair."): ["a woman brushes her hair"],
    ("objects", "a woman in a red shirt."): ["there is a woman", "there is a red shirt"],
}
# what the scripted judge calls entailed / contradicted, by description as sent; the rest is neutral
ENTAILED = {
    "a woman combs her hair in a bathroom.": {"there is a woman"},
    "a woman brushes her hair. she wears a red shirt.": {"a woman combs her hair", "there is a woman"},
    "a man runs on a track. the sky is blue and a dog watches.": {"a man runs on a track", "there is a blue sky"},
    "a man runs on a track and jumps over a hurdle under a blue sky.": {"a man runs on a track",
                                                                        "there is a blue sky"},
}
CONTRADICTED = {"a dog watches"}


def label(description, element):
    if element in ENTAILED.get(description, set()):
        return "entailment"
    return "contradiction" if element in CONTRADICTED else "neutral"


def between(text, start, end):
    return text.split(start, 1)[1].split(end, 1)[0]


def judge(body, malformed_once=None):
    """A deterministic judge that reads CapST's prompts as a model would."""
    content = body["messages"][0]["content"]  # a re-ask repeats it: answer it properly then
    if content.startswith("Below is a description of a video clip:"):
        kind = "events" if "key events" in content else "objects"
        caption = between(content, "Video Description: ", "\n\nExtract at most 10")
        return str({kind: EXTRACTED[(kind, caption)]})  # a Python dict string, as the prompt asks
    kind = "events" if "\nEvents: " in content else "objects"
    description = between(content, "Video Description:\n", "\n\n")
    elements = ast.literal_eval(between(content, f"{kind.title()}: ", "\nOutput a JSON"))
    entries = [{kind[:-1]: e, "relationship": label(description, e), "reason": "scripted"} for e in elements]
    if malformed_once is not None and (description, tuple(elements)) in malformed_once and len(body["messages"]) == 1:
        malformed_once.discard((description, tuple(elements)))
        entries = entries[:-1]  # one entry short: must be asked again
    return json.dumps({kind: entries})


def plain_scores(refs, captions):
    """CapST by hand: shares per video, then means and the F1 of the means, from the script's tables."""
    def share(elements, description):
        return 1.0 if not elements else sum(label(description.lower(), e) == "entailment" for e in elements) / len(elements)

    per_video = {}
    for ref in refs:
        pred = captions[ref.id]
        row = {}
        for column, kind in (("action", "events"), ("object", "objects")):
            ref_elems = list(getattr(ref, kind)) if getattr(ref, kind) is not None else \
                EXTRACTED[(kind, ref.caption.lower())]
            pred_elems = EXTRACTED[(kind, pred.lower())]
            row[column] = (share(ref_elems, pred), share(pred_elems, ref.caption))
        per_video[ref.id] = row

    def cell(ids, column):
        r = sum(per_video[i][column][0] for i in ids) / len(ids)
        p = sum(per_video[i][column][1] for i in ids) / len(ids)
        return {"f1": 100 * 2 * r * p / (r + p) if r + p else 0.0, "recall": 100 * r, "precision": 100 * p,
                "n": len(ids)}

    groups = {}
    for category in ("personal care", "sports & exercise"):  # the paper's order
        ids = [r.id for r in refs if r.category == category]
        if ids:
            groups[category] = ids
    groups["overall"] = [r.id for r in refs]
    return per_video, {g: {c: cell(ids, c) for c in ("action", "object")} for g, ids in groups.items()}


def assert_table(actual, expected):
    """Table 2 cells equal, to float rounding (pytest.approx does not nest)."""
    assert list(actual) == list(expected)
    for group in expected:
        assert list(actual[group]) == list(expected[group])
        for column in expected[group]:
            assert actual[group][column] == pytest.approx(expected[group][column]), (group, column)


def client(server, tmp_path, **settings):
    s = ChatSettings(model="judge-1", base_url=server.url, backoff=0.01, max_backoff=0.02, **settings)
    return OpenAIChatClient(s, api_key=KEY, cache=tmp_path / "cache.sqlite", progress=False)


def test_scores_match_a_plain_reference_and_the_right_requests_are_made(tmp_path):
    with FakeOpenAI(judge) as server, client(server, tmp_path) as c:
        result = evaluate_capst(CAPTIONS, REFERENCES, c)
    per_video, expected = plain_scores(REFERENCES, CAPTIONS)
    assert_table(result["scores"], expected)
    # by hand: action recall (0 + 1/2 + 1) / 3, precision (1 + 1/2 + 1) / 3, F1 of those means
    assert result["scores"]["overall"]["action"]["recall"] == pytest.approx(50.0)
    assert result["scores"]["overall"]["action"]["precision"] == pytest.approx(250 / 3)
    assert result["scores"]["overall"]["action"]["f1"] == pytest.approx(62.5)
    # ...which is not the mean of the videos' F1s (0, 1/2 and 1)
    assert 100 * (0 + 0.5 + 1) / 3 != pytest.approx(62.5)
    for sample in result["samples"]:
        assert (sample["action"]["recall"], sample["action"]["precision"]) == pytest.approx(per_video[sample["id"]]["action"])
        assert (sample["object"]["recall"], sample["object"]["precision"]) == pytest.approx(per_video[sample["id"]]["object"])
    # extraction: v1 4 (both sides), v2 2 (prediction only), v3 3; judgement: v1 4, v2 4, v3 2
    # (v3's reference has no event and its caption none: nothing to judge, each share 1.0)
    assert len(server.requests) == 19
    assert result["requests"]["requests"] == 19 and result["requests"]["failures"] == 0
    assert (result["videos"], result["scored"], result["failed"], result["missing"]) == (3, 3, [], [])
    assert result["reference_elements_given"] == {"events": 2, "objects": 1}
    v3 = next(s for s in result["samples"] if s["id"] == "v3")
    assert v3["events"] == {"reference": [], "prediction": [], "recall_labels": [], "precision_labels": []}


def test_the_prompts_sent_are_exact(tmp_path):
    with FakeOpenAI(judge) as server, client(server, tmp_path) as c:
        evaluate_capst(CAPTIONS, REFERENCES, c)
    sent = [r["body"]["messages"] for r in server.requests]
    assert all(body["model"] == "judge-1" and body["temperature"] == 0.0 for body in server.bodies())
    # recall of v2's events: the annotation's events against the predicted caption
    recall_v2 = [{"role": "user", "content": (
        "Given a video description and a list of events. For each event, classify the relationship between the "
        "video description and the event into three classes: entailment, neutral, contradiction.\n"
        "- \"entailment\" means that the video description entails the event.\n"
        "- \"contradiction\" means that some detail in the video description contradicts with the event.\n"
        "- \"neutral\" means that the relationship is neither \"entailment\" or \"contradiction\".\n\n"
        "Video Description:\na man runs on a track. the sky is blue and a dog watches.\n\n"
        "Events: ['a man runs on a track', 'a man jumps over a hurdle']\n"
        "Output a JSON formed as:\n{\n  \"events\": [\n"
        "    {\"event\": \"copy an event here\", \"relationship\": \"put class name here\",  "
        "\"reason\": \"give your reason here\"},\n    ...\n  ]\n}\n\n"
        "DO NOT PROVIDE ANY OTHER OUTPUT TEXT OR EXPLANATION. Only output the JSON. Output:")}]
    assert recall_v2 in sent
    # precision of v2's objects: the predicted objects against the reference caption
    assert judgement_messages(REFERENCES[1].caption, ["there is a blue sky", "there is a dog"], "objects") in sent
    assert extraction_messages(CAPTIONS["v3"], "objects") in sent
    assert extraction_messages(REFERENCES[2].caption, "events") not in sent  # the file gave v3's events


def test_split_references_extract_from_the_stage_two_captions(tmp_path):
    refs = REFERENCES[:1]
    with FakeOpenAI(judge) as server, client(server, tmp_path) as c:
        result = evaluate_capst({"v1": CAPTIONS["v1"]}, refs, c, split_references=True)
    sent = [r["body"]["messages"] for r in server.requests]
    assert extraction_messages("A woman brushes her hair.", "events") in sent
    assert extraction_messages("A woman in a red shirt.", "objects") in sent
    assert extraction_messages(refs[0].caption, "events") not in sent
    # precision still judges against the detailed caption
    assert judgement_messages(refs[0].caption, ["a woman combs her hair"], "events") in sent
    assert result["split_references"] is True and result["scored"] == 1


def test_a_malformed_judgement_is_asked_again_and_then_scored(tmp_path):
    once = {("a woman brushes her hair. she wears a red shirt.", ("there is a woman", "there is a bathroom"))}
    with FakeOpenAI(lambda body: judge(body, once)) as server, client(server, tmp_path) as c:
        result = evaluate_capst(CAPTIONS, REFERENCES, c)
    assert result["requests"]["reasks"] == 1 and result["requests"]["malformed"] == 1
    assert len(server.requests) == 20
    assert_table(result["scores"], plain_scores(REFERENCES, CAPTIONS)[1])


def test_a_video_whose_judgement_stays_malformed_is_reported_not_scored(tmp_path):
    def stubborn(body):
        content = body["messages"][0]["content"]
        if content.startswith("Given") and "Video Description:\na woman combs her hair" in content:
            return "I think the first one is entailed."
        return judge(body)

    with FakeOpenAI(stubborn) as server, client(server, tmp_path, reasks=1) as c:
        result = evaluate_capst(CAPTIONS, REFERENCES, c)
    assert result["scored"] == 2 and [s["id"] for s in result["samples"]] == ["v2", "v3"]
    [failure] = result["failed"]
    assert failure["id"] == "v1" and failure["stage"].startswith("judging ")
    assert failure["error"].startswith("malformed answer after 2 tries: not valid JSON")
    assert result["requests"]["failures"] >= 1
    _, expected = plain_scores(REFERENCES[1:], CAPTIONS)
    assert_table({"overall": result["scores"]["overall"]}, {"overall": expected["sports & exercise"]})
    assert "personal care" not in result["scores"]


def test_an_endpoint_failure_during_extraction_is_reported(tmp_path):
    from _fake_openai import error

    def broken(body):
        if "a still photo" in body["messages"][0]["content"]:
            return error(500, "judge crashed")
        return judge(body)

    with FakeOpenAI(broken) as server, client(server, tmp_path, max_retries=1) as c:
        result = evaluate_capst(CAPTIONS, REFERENCES, c)
    assert [f["id"] for f in result["failed"]] == ["v3"]
    assert result["failed"][0]["stage"].startswith("extracting ") and "from the prediction" in result["failed"][0]["stage"]
    assert result["failed"][0]["error"] == "HTTP 500: judge crashed (after 2 calls)"
    assert result["scores"]["overall"]["action"]["n"] == 2


def test_a_rerun_makes_no_call(tmp_path):
    with FakeOpenAI(judge) as server:
        with client(server, tmp_path) as c:
            first = evaluate_capst(CAPTIONS, REFERENCES, c)
        n = len(server.requests)
        with client(server, tmp_path) as c:
            second = evaluate_capst(CAPTIONS, REFERENCES, c)
        assert len(server.requests) == n
    assert second["scores"] == first["scores"] and second["samples"] == first["samples"]
    assert second["requests"]["calls"] == 0 and second["requests"]["cache_hits"] == 19


def test_captions_must_match_the_benchmark(tmp_path):
    with FakeOpenAI(judge) as server, client(server, tmp_path) as c:
        with pytest.raises(UserError, match=r"1 caption id\(s\) are not videos of the benchmark: 'v9'"):
            evaluate_capst({**CAPTIONS, "v9": "x"}, REFERENCES, c)
        partial = {"v1": CAPTIONS["v1"], "v2": CAPTIONS["v2"]}
        with pytest.raises(UserError, match=r"1 of 3 benchmark videos have no caption: 'v3'"):
            evaluate_capst(partial, REFERENCES, c)
        result = evaluate_capst(partial, REFERENCES, c, allow_missing=True)
    assert result["missing"] == ["v3"] and result["scored"] == 2 and result["videos"] == 3


def test_run_capst_from_files_to_report(tmp_path, monkeypatch):
    records = [{"video": f"{r.id}.mp4", "caption": r.caption, "spatial_caption": r.spatial or "s",
                "temporal_caption": r.temporal or "t", "category": r.category,
                **({"events": list(r.events)} if r.events is not None else {}),
                **({"objects": list(r.objects)} if r.objects is not None else {})} for r in REFERENCES]
    annotations = tmp_path / "metadata.json"
    annotations.write_text(json.dumps(records))
    assert read_carebench_references(annotations) == [
        CapstReference(**{**r.__dict__, "spatial": r.spatial or "s", "temporal": r.temporal or "t"}) for r in REFERENCES]
    captions = tmp_path / "care7b.jsonl"
    captions.write_text("".join(json.dumps({"id": k, "caption": v}) + "\n" for k, v in CAPTIONS.items()))
    monkeypatch.setenv("MY_JUDGE_KEY", KEY)
    with FakeOpenAI(judge) as server:
        settings = ChatSettings(model="judge-1", base_url=server.url, api_key_env="MY_JUDGE_KEY")
        with pytest.raises(ConfigError, match="no benchmark 'carebench'"):  # refused before any call
            run_capst(captions, annotations, tmp_path / "out", settings, progress=False,
                      retrieval={"recall": {"msrvtt": {}}}, retrieval_benchmark="carebench")
        assert server.requests == []
        retrieval = tmp_path / "results.json"
        retrieval.write_text(json.dumps({"recall": {"carebench/general": {"t2i_r1": 70.0, "i2t_r1": 74.0}}}))
        result = run_capst(captions, annotations, tmp_path / "out", settings, progress=False,
                           retrieval=retrieval)
    assert result["label"] == "care7b" and result["judge"]["model"] == "judge-1"
    assert result["judge"]["api_key_env"] == "MY_JUDGE_KEY"
    assert_table(result["scores"], plain_scores(REFERENCES, CAPTIONS)[1])
    assert (tmp_path / "out" / "llm-cache.sqlite").exists()
    overall = result["scores"]["overall"]
    avg_f1 = (overall["action"]["f1"] + overall["object"]["f1"]) / 2
    assert result["unified"] == pytest.approx({"avg_r1": 72.0, "avg_f1": avg_f1, "unified": (72.0 + avg_f1) / 2})
    assert "Unified score (CaRe, CaReBench Table 5): " in (tmp_path / "out" / "capst.md").read_text()
    saved = json.loads((tmp_path / "out" / "capst.json").read_text())
    assert_table(saved["scores"], result["scores"])
    assert saved["label"] == "care7b"
    for path in (tmp_path / "out").iterdir():
        if path.suffix in (".json", ".md"):
            assert KEY not in path.read_text()
