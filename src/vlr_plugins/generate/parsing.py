"""Reading what generation prompts get back from real models: lists, scores, paragraphs,
captions, and a reasoning model's answer without its thinking.

Every reader raises :class:`~vlr_plugins.chat.json_answer.MalformedAnswer` with a short
problem ("expected 5 items, found 6"), which the chat clients show the model when they ask
again; after the last re-ask the request is a failure that the pipeline records.
"""

from __future__ import annotations

import re

from vlr_plugins.chat.json_answer import MalformedAnswer

__all__ = ["parse_list_answer", "parse_score_answer", "parse_text_answer", "strip_thinking"]

# an item's marker: "1." "1)" "(1)" "[1]" "1:" "- " "* " "• ", "Caption 2:", "Positive caption 1 -",
# each maybe inside Markdown bold ("**1.**", "**Positive 1:**")
_MARKER = re.compile(
    r"""^\s*(?P<bold>\*\*|__)?\s*
        (?:
            [(\[]?\d{1,2}[.):\]](?!\d)
          | [-*\u2022\u00b7\u2013\u2014](?=\s)
          | (?:[A-Za-z-]+\s+)?(?:caption|positive|negative|option|item|description)s?\s*\#?\s*\d{1,2}\s*[:.)\-\u2013]
        )
        \s*(?(bold)(?:\*\*|__)?)\s*(?P<rest>.*)$""",
    re.IGNORECASE | re.VERBOSE,
)
_QUOTES = ('"', "'", "\u201c", "\u201d", "\u2018", "\u2019")
_LABEL = re.compile(r"^(?:paragraph|caption|answer|description|refined caption|new caption)\s*:\s*", re.IGNORECASE)
# the scoring prompt's own scale, when the model repeats it ("Score (0 to 10): 7")
_SCALE = re.compile(r"\(?\b0\s*(?:to|-|\u2013)\s*10\b\)?")
_OUT_OF = re.compile(r"(?<![\d.])(\d{1,2}(?:\.\d+)?)\s*(?:/\s*10|out of\s*10)\b", re.IGNORECASE)
_LABELLED = re.compile(r"\b(?:score|rating)\b[^\d\n]{0,20}?(\d{1,2}(?:\.\d+)?)(?![\d.])", re.IGNORECASE)
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?!\w|\.\d)")


def strip_thinking(text: str) -> str:
    """A reasoning model's answer without its thinking: the text after the last ``</think>``.

    Qwen3 "Thinking" templates open ``<think>`` in the prompt, so the answer holds only
    the closing tag; both forms are read. An answer whose thinking never closes (cut by
    ``max_tokens``) has no answer: :class:`MalformedAnswer`. Text without tags is returned
    stripped.
    """
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1].strip()
    if "<think>" in text:
        raise MalformedAnswer("the answer holds only reasoning (<think> without </think>): "
                              "give the final answer after your reasoning")
    return text.strip()


def _clean(item: str) -> str:
    item = item.strip()
    for marker in ("**", "__"):
        if item.startswith(marker) and item.endswith(marker) and len(item) > 2 * len(marker):
            item = item[len(marker):-len(marker)].strip()
    if len(item) >= 2 and item[0] in _QUOTES and item[-1] in _QUOTES:
        item = item[1:-1].strip()
    return item


def parse_list_answer(text: str, count: int, *, what: str = "captions") -> list[str]:
    """The ``count`` items of a list answer, in order, cleaned.

    Reads numbered (``1.``, ``1)``, ``(1)``, ``**1.**``), bulleted (``-``, ``*``, ``•``) and
    labelled (``Caption 1:``, ``Positive caption 2 -``) items. Lines before the first item
    are a preamble ("Here are five captions:") and are dropped; a line right after an item
    that is not an item continues it (a wrapped caption); after a blank line that follows
    the last item, text is a closing remark and is dropped. Without any marker, an answer
    of exactly ``count`` non-empty lines is read line by line. Surrounding quotes and
    Markdown bold are removed from each item.

    Raises :class:`MalformedAnswer` for no items, an empty item, or another number of
    items than ``count`` (the message names both numbers).

    Example::

        >>> parse_list_answer("Sure! Here they are:\\n1. A dog runs.\\n2. A dog plays.", 2)
        ['A dog runs.', 'A dog plays.']
    """
    items: list[str] = []
    after_blank = False
    for line in text.splitlines():
        if not line.strip():
            after_blank = bool(items)
            continue
        hit = _MARKER.match(line)
        if hit:
            items.append(hit.group("rest"))
            after_blank = False
        elif items and not after_blank:
            items[-1] = f"{items[-1]} {line.strip()}"
    if not items:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) != count:
            raise MalformedAnswer(f"expected a numbered list of {count} {what}, found no list items")
        items = lines
    items = [_clean(i) for i in items]
    empty = [n for n, i in enumerate(items, 1) if not i]
    if empty:
        raise MalformedAnswer(f"item {empty[0]} of the list is empty")
    if len(items) != count:
        raise MalformedAnswer(f"expected {count} {what}, found {len(items)}")
    return items


def parse_score_answer(text: str, low: int = 0, high: int = 10) -> int | float:
    """The score in a judge's answer: an integer (or a decimal) in ``[low, high]``.

    Reads a bare number (``"7"``, ``"**7**"``, ``"7."``), ``"7/10"`` or ``"7 out of 10"``,
    ``"Score: 7"``, or the one number of a sentence ("I would give it a 7."); the prompt's
    own scale when repeated ("0 to 10") is not a score. Raises :class:`MalformedAnswer`
    for no number, several different numbers, or a number out of range.
    """
    body = _SCALE.sub(" ", strip_thinking(text).replace("*", "")).strip()
    for rule in (_OUT_OF, _LABELLED):
        hits = rule.findall(body)
        if hits:
            return _in_range(hits[-1], low, high)
    numbers = list(dict.fromkeys(_NUMBER.findall(body)))
    if not numbers:
        raise MalformedAnswer(f"expected one integer from {low} to {high}, found none")
    if len(numbers) > 1:
        raise MalformedAnswer(f"expected one integer from {low} to {high}, found several ({', '.join(numbers)})")
    return _in_range(numbers[0], low, high)


def _in_range(token: str, low: int, high: int) -> int | float:
    value = float(token)
    if not low <= value <= high:
        raise MalformedAnswer(f"expected an integer from {low} to {high}, found {token}")
    return int(value) if value.is_integer() else value


def parse_text_answer(text: str, *, what: str = "caption") -> str:
    """A free-text answer (a caption, a paragraph): thinking removed, a repeated label
    (``Paragraph:``, ``Caption:``) and surrounding quotes dropped, lines joined by one
    space. Raises :class:`MalformedAnswer` when nothing is left."""
    body = strip_thinking(text)
    body = " ".join(line.strip() for line in body.splitlines() if line.strip())
    body = _clean(_LABEL.sub("", _clean(body)))
    if not body:
        raise MalformedAnswer(f"the {what} is empty")
    return body
