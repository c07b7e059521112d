"""CapST's four prompts (extract events, extract objects, judge events, judge objects) as
chat messages; the prompt texts are data files in ``prompts/``."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from importlib import resources
from string import Template

__all__ = ["ELEMENT_KINDS", "extraction_messages", "judgement_messages", "prompt_template"]

#: the two kinds of element: events give the action scores, objects the object scores
ELEMENT_KINDS = ("events", "objects")


@cache
def prompt_template(name: str) -> Template:
    """The prompt file ``prompts/<name>.txt`` (its final newline is the file's, not the
    prompt's); placeholders are ``$caption``, ``$description`` and ``$elements``."""
    path = resources.files("vlr_plugins.eval.capst").joinpath("prompts", f"{name}.txt")
    text = path.read_text("utf-8")
    return Template(text.removesuffix("\n"))


def _kind(kind: str) -> str:
    if kind not in ELEMENT_KINDS:
        raise ValueError(f"element kind must be one of {', '.join(ELEMENT_KINDS)}, found {kind!r}")
    return kind


def extraction_messages(caption: str, kind: str) -> list[dict[str, str]]:
    """Ask for at most 10 ``kind`` ("events" or "objects") in ``caption``, one user turn.

    As CaReBench's released evaluation does, the caption is lower-cased and its double
    quotes become single quotes first (the answer is a Python dict string in double quotes).
    """
    text = caption.lower().replace('"', "'")
    body = prompt_template(f"extract_{_kind(kind)}").substitute(caption=text)
    return [{"role": "user", "content": body}]


def judgement_messages(description: str, elements: Sequence[str], kind: str) -> list[dict[str, str]]:
    """Ask whether ``description`` entails, contradicts or is neutral to each element.

    The description is lower-cased (as released); the elements are listed as a Python list
    literal (``['a man walks', 'a dog barks']``), as the released prompt formats them.
    """
    body = prompt_template(f"judge_{_kind(kind)}").substitute(
        description=description.lower(), elements=str(list(elements)))
    return [{"role": "user", "content": body}]
