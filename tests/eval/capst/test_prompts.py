"""CapST's prompts: the released texts, exactly, as one user message each."""

from __future__ import annotations

import pytest

from vlr_plugins.eval.capst import extraction_messages, judgement_messages, prompt_template

# CaReBench's released prompts (utils/dream_gpt.py), written out here as the judge must see them
EVENTS_PROMPT = (
    "Below is a description of a video clip:\n"
    "Video Description: a man in a 'blue' shirt opens the door. he walks in.\n\n"
    "Extract at most 10 key events from the above video description paragraph. Requirements\n"
    ":- An event must include an action, motion or movement (NOT STATIC INFORMATION). DON'T repeat same events.\n"
    "- Every event is represented by a brief sentence within 10 words, with a subject, a predicate and "
    "optionally an object, avoid unnecessary appearance descriptions.\n"
    "- Every event must be atomic, meaning that it cannot be further split into multiple events.\n"
    "- Scene cuts and camera motions are NOT events.\n"
    "- Substitute pronouns by the nouns they refer to.\n\n"
    "Please generate the response in the form of a Python dictionary string with keys \"events\". "
    "The value of \"events\" is a List(str), of which each item is an event. DO NOT PROVIDE ANY OTHER "
    "OUTPUT TEXT OR EXPLANATION. Only provide the Python dictionary string. For example, your response "
    "should look like this: {\"events\": [event1, event2, ...]}")

OBJECTS_JUDGEMENT = (
    "Given a video description and a list of objects. For each object, classify the relationship between "
    "the video description and the object into three classes: entailment, neutral, contradiction.\n"
    "- \"entailment\" means that the video description entails the object.\n"
    "- \"contradiction\" means that some detail in the video description contradicts with the object.\n"
    "- \"neutral\" means that the relationship is neither \"entailment\" or \"contradiction\".\n\n"
    "Video Description:\na man in a \"blue\" shirt opens the door.\n\n"
    "Objects: ['There is a man.', \"There is a man's blue shirt.\"]\n"
    "Output a JSON formed as:\n"
    "{\n"
    "  \"objects\": [\n"
    "    {\"object\": \"copy an object here\", \"relationship\": \"put class name here\",  "
    "\"reason\": \"give your reason here\"},\n"
    "    ...\n"
    "  ]\n"
    "}\n\n"
    "DO NOT PROVIDE ANY OTHER OUTPUT TEXT OR EXPLANATION. Only output the JSON. Output:")


def test_extraction_is_the_released_prompt_on_the_lowercased_caption():
    messages = extraction_messages('A man in a "blue" shirt opens the door. He walks in.', "events")
    assert messages == [{"role": "user", "content": EVENTS_PROMPT}]


def test_objects_extraction_asks_for_one_attribute_each():
    [message] = extraction_messages("An old man.", "objects")
    assert message["content"].startswith("Below is a description of a video clip:\nVideo Description: an old man.\n\n"
                                         "Extract at most 10 key objects from the above video description")
    assert ("If an object has multiple attributes, split it into multiple objects, each with a single "
            "attribute.") in message["content"]


def test_judgement_lists_the_elements_as_a_python_list():
    messages = judgement_messages('A man in a "blue" shirt opens the door.',
                                  ["There is a man.", "There is a man's blue shirt."], "objects")
    assert messages == [{"role": "user", "content": OBJECTS_JUDGEMENT}]


def test_events_judgement_names_events():
    [message] = judgement_messages("A dog runs.", ["a dog runs"], "events")
    assert "Video Description:\na dog runs.\n\nEvents: ['a dog runs']\n" in message["content"]
    assert '{"event": "copy an event here"' in message["content"]


def test_a_caption_with_a_dollar_sign_is_not_a_placeholder():
    [message] = extraction_messages("A sign reads $caption and $5.", "events")
    assert "Video Description: a sign reads $caption and $5.\n\n" in message["content"]


def test_prompt_files_are_the_templates():
    assert set(prompt_template("judge_events").get_identifiers()) == {"description", "elements"}
    assert prompt_template("extract_objects").get_identifiers() == ["caption"]


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="element kind must be one of events, objects, found 'actions'"):
        extraction_messages("x", "actions")
