"""Reading real model output: lists in every usual shape, preambles and closing remarks,
wrong item counts, scores in free text, reasoning models' thinking."""

from __future__ import annotations

import pytest

from vlr_plugins.chat.json_answer import MalformedAnswer
from vlr_plugins.generate.parsing import parse_list_answer, parse_score_answer, parse_text_answer, strip_thinking

THREE = ["A dog runs on the beach.", "A brown dog plays by the sea.", "A dog on the sand."]


@pytest.mark.parametrize("text", [
    "1. A dog runs on the beach.\n2. A brown dog plays by the sea.\n3. A dog on the sand.",
    "1) A dog runs on the beach.\n2) A brown dog plays by the sea.\n3) A dog on the sand.",
    "(1) A dog runs on the beach.\n(2) A brown dog plays by the sea.\n(3) A dog on the sand.",
    "- A dog runs on the beach.\n- A brown dog plays by the sea.\n- A dog on the sand.",
    "* A dog runs on the beach.\n* A brown dog plays by the sea.\n* A dog on the sand.",
    "\u2022 A dog runs on the beach.\n\u2022 A brown dog plays by the sea.\n\u2022 A dog on the sand.",
    "**1.** A dog runs on the beach.\n**2.** A brown dog plays by the sea.\n**3.** A dog on the sand.",
    "Caption 1: A dog runs on the beach.\nCaption 2: A brown dog plays by the sea.\nCaption 3: A dog on the sand.",
    "Positive caption 1 - A dog runs on the beach.\nPositive caption 2 - A brown dog plays by the sea.\n"
    "Positive caption 3 - A dog on the sand.",
    '1. "A dog runs on the beach."\n2. "A brown dog plays by the sea."\n3. \u201cA dog on the sand.\u201d',
    "Sure! Here are three captions:\n\n1. A dog runs on the beach.\n2. A brown dog plays by the sea.\n"
    "3. A dog on the sand.\n\nI hope these help!",
    "A dog runs on the beach.\nA brown dog plays by the sea.\nA dog on the sand.",  # bare lines
])
def test_list_shapes(text):
    assert parse_list_answer(text, 3) == THREE


def test_a_wrapped_item_continues_on_the_next_line():
    text = "1. A dog runs\n   on the beach.\n2. A brown dog plays by the sea.\n3. A dog on the sand."
    assert parse_list_answer(text, 3) == THREE


@pytest.mark.parametrize("text, problem", [
    ("1. A dog.\n2. A cat.", "expected 3 captions, found 2"),
    ("1. A.\n2. B.\n3. C.\n4. D.", "expected 3 captions, found 4"),
    ("Dogs are nice.", "expected a numbered list of 3 captions, found no list items"),
    ("1. A dog.\n2. \"\"\n3. A cat.", "item 2 of the list is empty"),
])
def test_wrong_lists_say_what_is_wrong(text, problem):
    with pytest.raises(MalformedAnswer, match=problem):
        parse_list_answer(text, 3)


@pytest.mark.parametrize("text, score", [
    ("7", 7), ("**7**", 7), ("7.", 7), (" 10 ", 10), ("0", 0), ("7/10", 7), ("7 out of 10", 7),
    ("Score: 6", 6), ("Score (0 to 10): 4", 4), ("I would give it a 7.", 7), ("8.5", 8.5),
    ("<think>between 3 and 6</think>5", 5), ("The paragraph is accurate. Rating: 9", 9),
])
def test_score_in_free_text(text, score):
    assert parse_score_answer(text) == score


@pytest.mark.parametrize("text, problem", [
    ("I cannot judge this.", "found none"),
    ("Between 3 and 6.", r"found several \(3, 6\)"),
    ("11", "found 11"),
    ("", "found none"),
])
def test_bad_scores(text, problem):
    with pytest.raises(MalformedAnswer, match=problem):
        parse_score_answer(text)


def test_text_answers_lose_labels_quotes_and_line_breaks():
    assert parse_text_answer('Paragraph: "A dog runs.\nIt is sunny."', what="paragraph") == "A dog runs. It is sunny."
    with pytest.raises(MalformedAnswer, match="the paragraph is empty"):
        parse_text_answer("  \n", what="paragraph")


def test_thinking_is_removed():
    assert strip_thinking("<think>hmm</think>\n\nA cat.") == "A cat."
    assert strip_thinking("the template opened it</think>A cat.") == "A cat."
    assert strip_thinking("  A cat. ") == "A cat."
    with pytest.raises(MalformedAnswer, match="only reasoning"):
        strip_thinking("<think>cut off by max_tokens")
