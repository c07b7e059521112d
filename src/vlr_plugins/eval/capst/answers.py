"""Reading CapST's answers: the extracted elements, and one NLI label per judged element."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vlr_plugins.chat.json_answer import MalformedAnswer, parse_json_answer

__all__ = ["NLI_LABELS", "elements_parser", "judgement_parser", "parse_elements", "parse_judgement"]

#: the three relationships a judge may give; only "entailment" counts as a match
NLI_LABELS = ("entailment", "neutral", "contradiction")


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _list_under(value: Any, kind: str) -> list[Any]:
    if not isinstance(value, dict) or kind not in value:
        found = f"an object with keys {sorted(value)}" if isinstance(value, dict) else _type(value)
        raise MalformedAnswer(f'expected an object with the key "{kind}", found {found}')
    items = value[kind]
    if not isinstance(items, list):
        raise MalformedAnswer(f'"{kind}" must be a list, found {_type(items)}')
    return items


def parse_elements(text: str, kind: str) -> list[str]:
    """The ``kind`` list of an extraction answer (``{"events": ["...", ...]}``, JSON or the
    Python dict string the prompt asks for); blank entries are dropped, none is added.

    More than the 10 asked for are kept, as the released code keeps them.
    """
    items = _list_under(parse_json_answer(text, python_literal=True), kind)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise MalformedAnswer(f'"{kind}"[{i}] must be a string, found {_type(item)}')
    return [item.strip() for item in items if item.strip()]


def parse_judgement(text: str, kind: str, n: int) -> list[str]:
    """One label of :data:`NLI_LABELS` per judged element, in the answer's order.

    Expects ``{"events": [{"event": ..., "relationship": "entailment", "reason": ...}, ...]}``
    with exactly ``n`` entries (one per element asked about); labels are read
    case-insensitively.
    """
    entries = _list_under(parse_json_answer(text, python_literal=True), kind)
    if len(entries) != n:
        raise MalformedAnswer(f'expected {n} entries in "{kind}", one per item of the list, '
                              f'found {len(entries)}')
    labels = []
    for i, entry in enumerate(entries):
        label = entry.get("relationship") if isinstance(entry, dict) else None
        label = label.strip().lower() if isinstance(label, str) else label
        if label not in NLI_LABELS:
            raise MalformedAnswer(f'"{kind}"[{i}]["relationship"] must be one of '
                                  f'{", ".join(NLI_LABELS)}, found {label!r}')
        labels.append(label)
    return labels


def elements_parser(kind: str) -> Callable[[str], list[str]]:
    """``parse(text)`` for an extraction request (see :class:`~vlr_plugins.chat.ChatRequest`)."""
    return lambda text: parse_elements(text, kind)


def judgement_parser(kind: str, n: int) -> Callable[[str], list[str]]:
    """``parse(text)`` for a judgement request about ``n`` elements."""
    return lambda text: parse_judgement(text, kind, n)
