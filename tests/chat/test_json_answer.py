"""parse_json_answer and reask_messages: what counts as a JSON answer, and the re-ask turn."""

from __future__ import annotations

import pytest

from vlr_plugins.chat import MalformedAnswer, parse_json_answer, reask_messages
from vlr_plugins.chat.json_answer import REASK_PROMPT


@pytest.mark.parametrize("text", ['{"events": ["a", "b"]}', '  {"events": ["a", "b"]}\n',
                                  '```json\n{"events": ["a", "b"]}\n```', '```\n{"events": ["a", "b"]}```'])
def test_json_with_whitespace_or_one_code_fence(text):
    assert parse_json_answer(text) == {"events": ["a", "b"]}


def test_python_literals_only_when_asked_for():
    text = "{'objects': ['There is a red cup.', \"There is a dog's bowl.\"]}"
    assert parse_json_answer(text, python_literal=True) == {
        "objects": ["There is a red cup.", "There is a dog's bowl."]}
    with pytest.raises(MalformedAnswer, match=r"^not valid JSON \(Expecting property name"):
        parse_json_answer(text)


@pytest.mark.parametrize("text, problem", [
    ("", "the answer is empty"),
    ("```json\n```", "the answer is empty"),
    ('Here you go: {"events": []}', "not valid JSON (Expecting value at line 1, column 1)"),
])
def test_anything_else_is_malformed(text, problem):
    with pytest.raises(MalformedAnswer) as info:
        parse_json_answer(text)
    assert str(info.value) == problem


def test_a_trailing_comma_is_malformed():
    # the wording after "not valid JSON (" is json's own and differs between Python versions
    with pytest.raises(MalformedAnswer, match=r"^not valid JSON \(.* at line 1, column 1[67]\)$"):
        parse_json_answer('{"events": ["a",]}')


def test_code_is_never_evaluated():
    with pytest.raises(MalformedAnswer, match="nor a Python literal"):
        parse_json_answer("__import__('os').getcwd()", python_literal=True)


def test_reask_appends_the_answer_and_names_the_problem():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    out = reask_messages(messages, "oops", "not valid JSON")
    assert out == [*messages, {"role": "assistant", "content": "oops"},
                   {"role": "user", "content": REASK_PROMPT.format(problem="not valid JSON")}]
    assert messages == [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
