"""Reading a JSON answer out of a language model's text, and asking again when it is not one."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["REASK_PROMPT", "MalformedAnswer", "malformed_error", "parse_json_answer", "reask_messages"]

#: the follow-up turn that asks for a malformed answer again; ``{problem}`` names what was wrong
REASK_PROMPT = ("Your answer could not be read: {problem}. Answer again with only what was "
                "asked for above, in the format asked for, and no other text.")

_FENCE = re.compile(r"^```[A-Za-z]*\s*\n?(.*?)\n?```$", re.DOTALL)


class MalformedAnswer(ValueError):
    """An answer is not in the format its request asked for; the message says how, briefly
    (it is shown to the model when the request is asked again)."""


def parse_json_answer(text: str, *, python_literal: bool = False) -> Any:
    """The JSON value in ``text``: surrounding whitespace and one Markdown code fence
    (```` ```json ... ``` ````) are allowed, nothing else.

    With ``python_literal``, a Python literal is accepted too (``{'events': ['a', 'b']}``),
    for prompts that ask for "a Python dictionary string"; it is read with
    :func:`ast.literal_eval`, which evaluates no code. Raises :class:`MalformedAnswer`.
    """
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if not body:
        raise MalformedAnswer("the answer is empty")
    try:
        return json.loads(body)
    except json.JSONDecodeError as e:
        problem = f"not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})"
    if python_literal:
        try:
            return ast.literal_eval(body)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            problem += " nor a Python literal"
    raise MalformedAnswer(problem)


def reask_messages(messages: Sequence[Mapping[str, Any]], answer: str,
                   problem: str) -> list[dict[str, Any]]:
    """``messages``, the malformed ``answer`` as the assistant's turn, and a user turn that
    names the ``problem`` (:data:`REASK_PROMPT`): another request, so another cache entry."""
    return [*(dict(m) for m in messages), {"role": "assistant", "content": answer},
            {"role": "user", "content": REASK_PROMPT.format(problem=problem)}]


def malformed_error(tries: int, problem: str) -> str:
    """A request's error once none of its ``tries`` answers could be read: ``malformed answer
    after 2 tries: <the last answer's problem>``."""
    return f"malformed answer after {tries} {'try' if tries == 1 else 'tries'}: {problem}"
