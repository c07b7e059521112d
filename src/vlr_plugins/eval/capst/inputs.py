"""CapST's inputs: the captions a model wrote (JSON Lines), and CaReBench's references
(captions, category and, where the file has them, the reference events and objects)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from vlr_plugins.data._text_files import json_lines
from vlr_plugins.data.readers._common import (
    expect_object,
    load_json,
    record_error,
    text_value,
)
from vlr_plugins.data.readers.carebench import read_carebench
from vlr_plugins.errors import DataFormatError, _type_name

__all__ = ["CapstReference", "read_captions_jsonl", "read_carebench_references"]


@dataclass(frozen=True)
class CapstReference:
    """One benchmark video as CapST needs it.

    ``caption``: the detailed (Stage-I) caption, the description predicted elements are
    judged against; ``events`` / ``objects``: the reference elements when the annotation
    file lists them (``None``: extract them); ``spatial`` / ``temporal``: the Stage-II
    captions, from which ``split_references`` extracts objects and events instead.
    """

    id: str
    caption: str
    category: str | None = None
    events: tuple[str, ...] | None = None
    objects: tuple[str, ...] | None = None
    spatial: str | None = None
    temporal: str | None = None


def read_captions_jsonl(path: str | os.PathLike[str]) -> dict[str, str]:
    """``{video id: caption}`` from JSON Lines of ``{"id": ..., "caption": ...}``.

    The id is the video's id in the benchmark (CaReBench: the file name without its
    extension); a number is read as its decimal string. Errors name the line and field;
    a repeated id names both lines.
    """
    path = os.fspath(path)
    out: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for line_no, raw in json_lines(path):
        error = record_error(path, line_no, record_kind="line")
        rec = expect_object(raw, error)
        vid = rec.get("id")
        if isinstance(vid, int) and not isinstance(vid, bool):
            vid = str(vid)
        vid = text_value(vid, "id", error)
        caption = rec.get("caption")
        if not isinstance(caption, str):
            raise error("caption", f"expected a string, found {_type_name(caption)}")
        if vid in first_line:
            raise error("id", f"duplicate id {vid!r}, first on line {first_line[vid]}")
        first_line[vid] = line_no
        out[vid] = caption
    if not out:
        raise DataFormatError(path, "expected one caption per line, found none")
    return out


def _elements(rec: dict, field: str, error) -> tuple[str, ...] | None:
    value = rec.get(field)
    if value is None:
        return None
    if not isinstance(value, list):
        raise error(field, f"expected a list of strings, found {_type_name(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise error(f"{field}[{i}]", f"expected a string, found {_type_name(item)}")
    return tuple(item for item in value if item.strip())


def read_carebench_references(path: str | os.PathLike[str], *,
                              category_field: str = "category") -> list[CapstReference]:
    """Every video of CaReBench's ``json/metadata.json`` as a :class:`CapstReference`.

    Captions, ids and categories come from :func:`~vlr_plugins.data.readers.read_carebench`
    (same checks, same caveat about the category key); that reader ignores the
    ``events`` and ``objects`` lists, so they are read here: when a record has them (a
    list of strings each, possibly empty) they are the reference elements, as the released
    evaluation uses them; when not, CapST extracts them. A ``caption`` given as a list is
    joined with spaces.
    """
    path = os.fspath(path)
    care = read_carebench(path, category_field=category_field)
    records = load_json(path)
    kinds = care.text_kinds or ()
    texts: list[dict[str, list[str]]] = [{} for _ in care.item_ids]
    for text, owner, kind in zip(care.texts, care.text_owner.tolist(), kinds):
        texts[owner].setdefault(kind, []).append(text)
    out = []
    for i, (vid, rec) in enumerate(zip(care.item_ids, records)):
        error = record_error(path, i)
        out.append(CapstReference(
            id=vid, caption=" ".join(texts[i]["general"]),
            category=None if care.categories is None else care.categories[i],
            events=_elements(rec, "events", error), objects=_elements(rec, "objects", error),
            spatial=texts[i]["spatial"][0], temporal=texts[i]["temporal"][0]))
    return out
