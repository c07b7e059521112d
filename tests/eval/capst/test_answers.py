"""Reading the judge's answers: extracted elements and NLI labels; anything else is malformed."""

from __future__ import annotations

import pytest

from vlr_plugins.chat import MalformedAnswer
from vlr_plugins.eval.capst import parse_elements, parse_judgement


def test_elements_from_the_python_dict_string_the_prompt_asks_for():
    text = "{'events': ['a man walks', \"a man's dog barks\", '  '], 'extra': 1}"
    assert parse_elements(text, "events") == ["a man walks", "a man's dog barks"]
    assert parse_elements('```json\n{"objects": []}\n```', "objects") == []


def test_more_than_ten_elements_are_kept():
    text = str({"events": [f"event {i}" for i in range(12)]})
    assert len(parse_elements(text, "events")) == 12


@pytest.mark.parametrize("text, problem", [
    ('{"event": ["a"]}', 'expected an object with the key "events", found an object with keys [\'event\']'),
    ('["a man walks"]', 'expected an object with the key "events", found list'),
    ('{"events": "a man walks"}', '"events" must be a list, found str'),
    ('{"events": ["a", 3]}', '"events"[1] must be a string, found int'),
])
def test_malformed_elements(text, problem):
    with pytest.raises(MalformedAnswer) as info:
        parse_elements(text, "events")
    assert str(info.value) == problem


def judged(*labels, kind="events"):
    one = kind[:-1]
    import json

    return json.dumps({kind: [{one: f"{one} {i}", "relationship": label, "reason": "because"}
                              for i, label in enumerate(labels)]})


def test_labels_in_order_case_insensitive():
    assert parse_judgement(judged("Entailment", " neutral ", "CONTRADICTION"), "events", 3) == [
        "entailment", "neutral", "contradiction"]
    assert parse_judgement(judged("entailment", kind="objects"), "objects", 1) == ["entailment"]


@pytest.mark.parametrize("text, n, problem", [
    (judged("entailment"), 2, 'expected 2 entries in "events", one per item of the list, found 1'),
    (judged("entailed"), 1, ('"events"[0]["relationship"] must be one of entailment, neutral, contradiction, '
                             "found 'entailed'")),
    ('{"events": ["entailment"]}', 1, ('"events"[0]["relationship"] must be one of entailment, neutral, '
                                       "contradiction, found None")),
    ("The first event is entailed.", 1, "not valid JSON (Expecting value at line 1, column 1) nor a Python literal"),
])
def test_malformed_judgements(text, n, problem):
    with pytest.raises(MalformedAnswer) as info:
        parse_judgement(text, "events", n)
    assert str(info.value) == problem
