"""DREAM-1K (Wang et al., 2024) as a retrieval set: detailed descriptions and their events."""

from __future__ import annotations

import json
import os
from typing import Any

from vlr_plugins.data._text_files import json_lines
from vlr_plugins.data.readers._common import (
    ErrorFn,
    SetBuilder,
    expect_list,
    expect_object,
    first_char,
    load_json,
    record_error,
    text_field,
    text_list,
)
from vlr_plugins.data.retrieval_set import RetrievalSet
from vlr_plugins.errors import _type_name
from vlr_plugins.registry import READERS

__all__ = ["read_dream1k"]

_PLACEHOLDER = "<placeholder>"


def _vid(rec: dict[str, Any], field: str, error: ErrorFn) -> str:
    value = rec.get(field)
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise error(field, f"expected a non-empty string or an integer, found {json.dumps(value)}")
    return str(value)


def _events(rec: dict[str, Any], error: ErrorFn, field: str = "events") -> list[str]:
    # the hub card types "events" as a string; accept a JSON-encoded list as well as a list
    value = rec.get(field)
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            rec = {field: json.loads(value)}
        except json.JSONDecodeError as e:
            raise error(
                field,
                f"expected a list of strings, found a string that is not a JSON list ({e.msg})",
            ) from None
    return text_list(rec, field, error)


def _source(value: Any, error: ErrorFn, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise error(field, f"expected a non-empty string, found {_type_name(value)}")
    return value.removeprefix("DREAM/")


def _nested(error: ErrorFn, prefix: str) -> ErrorFn:
    """``error`` with field names under ``prefix`` (``extra_info.events``)."""
    return lambda field, problem: error(prefix if field is None else f"{prefix}.{field}", problem)


def _contents(messages: Any, role: str, kind: str) -> list[dict[str, Any]]:
    return [
        c
        for m in messages
        if isinstance(m, dict) and m.get("role") == role
        for c in (m.get("content") or [])
        if isinstance(c, dict) and c.get("type") == kind
    ]


def _tarsier_record(rec: dict[str, Any], error: ErrorFn, video_ext: str) -> tuple:
    """Tarsier's ``DREAM-1k.jsonl``, main branch (``messages``) or ``tarsier`` branch (``text``)."""
    vid = _vid(rec, "vid", error)
    if "messages" in rec:
        messages = rec["messages"]
        if not isinstance(messages, list):
            raise error("messages", f"expected a list, found {_type_name(messages)}")
        replies = _contents(messages, "assistant", "text")
        if len(replies) != 1:
            raise error(
                "messages",
                f"expected one assistant text (the reference description), found {len(replies)}",
            )
        description = text_field(replies[0], "reference", _nested(error, "messages[assistant]"))
        videos = _contents(messages, "user", "video")
        holder = videos[0].get("video") if videos else None
        video = holder.get("video_file") if isinstance(holder, dict) else None
    elif isinstance(rec.get("text"), dict):
        description = text_field(rec["text"], "response", _nested(error, "text"))
        video = rec.get("video_file")
    else:
        raise error(
            None,
            "expected Tarsier's 'messages' (main branch) or 'text' (tarsier "
            "branch) holding the reference description, found neither",
        )
    extra = rec.get("extra_info")
    if not isinstance(extra, dict):
        raise error("extra_info", f"expected an object holding 'events', found {_type_name(extra)}")
    events = _events(extra, _nested(error, "extra_info"))
    # an unfilled placeholder means "<video_dir>/<vid>.mp4" (Tarsier's fill_in_video_file)
    if not isinstance(video, str) or video.strip() in ("", _PLACEHOLDER):
        video = f"{vid}{video_ext}"
    return vid, video, _source(rec.get("dataset"), error, "dataset"), description, events


def _hub_record(rec: dict[str, Any], error: ErrorFn) -> tuple:
    """The hub's ``json/metadata.json``: ``idx, video_file, source, description, events, ...``."""
    vid = _vid(rec, "idx", error)
    video = text_field(rec, "video_file", error)
    # LLaVA-NeXT's DREAM-1K eval joins the file name to the unzipped video folder
    return (
        vid,
        os.path.basename(video),
        _source(rec.get("source"), error, "source"),
        text_field(rec, "description", error),
        _events(rec, error),
    )


@READERS.register(name="dream1k")
def read_dream1k(
    path: str | os.PathLike[str],
    *,
    media_root: str | os.PathLike[str] | None = None,
    check_media: bool = False,
    video_ext: str = ".mp4",
) -> RetrievalSet:
    """DREAM-1K detailed-description and event-level retrieval: 1,000 videos from 5 sources.

    Each video gets one ``"detailed"`` text (the human reference description) and one
    ``"event"`` text per annotated event; ``categories`` holds the source
    (``movie_animation``, ``movie_live_action``, ``vertical_video``, ``videvo``,
    ``youtube``). ``with_texts("detailed")`` is DREAM-D, ``with_texts("event")`` DREAM-E.

    Reads any of the three published forms (told apart by content, not by name):

    * Tarsier ``data/annotations/DREAM-1k.jsonl``, main branch: JSON Lines with ``vid``,
      ``dataset`` (``"DREAM/<source>"``), ``messages`` (the assistant's text
      ``reference`` is the description) and ``extra_info.events``;
    * the same file on Tarsier's ``tarsier`` branch: ``text.response`` is the description;
    * the hub release ``omni-research/DREAM-1K`` ``json/metadata.json``: a JSON array of
      ``{idx, video_file, source, description, events, ...}``.

    Media: for Tarsier files the ``video_file`` if it was filled in, else ``<vid>.mp4``
    (``video_ext``), as Tarsier's ``fill_in_video_file`` notebook does; for the hub file
    the file name of ``video_file``, relative to the folder the video zip unpacks to.
    Item ids are ``vid`` / ``idx`` as strings. Errors name the file, the line (JSON Lines,
    1-based) or record (array, 0-based) and the field.

    Caveat (guessed): the hub card types ``events`` as a string; this reader accepts a list
    or a JSON-encoded list. Treating each event sentence as one event-level query is our
    reading of "event-based retrieval" (multi-view captions paper, Table 3).

    Reference: Wang et al., "Tarsier: Recipes for Training and Evaluating Large Video
    Description Models", 2024 (DREAM-1K).

    Example::

        >>> dream = read_dream1k("tarsier/data/annotations/DREAM-1k.jsonl",
        ...                      media_root="DREAM-1K/videos")  # doctest: +SKIP
        >>> dream.with_texts("event").texts[:2]  # doctest: +SKIP
        ('A character emerges from smoke and fire.', 'The character half kneels on the ground.')
    """
    path = os.fspath(path)
    hub = first_char(path) == "["
    if hub:
        records = [
            (r, record_error(path, i))
            for i, r in enumerate(expect_list(path, load_json(path), "video objects"))
        ]
    else:
        records = [(r, record_error(path, n, "line")) for n, r in json_lines(path)]
    out = SetBuilder(path)
    for raw, error in records:
        rec = expect_object(raw, error)
        parsed = _hub_record(rec, error) if hub else _tarsier_record(rec, error, video_ext)
        vid, media, source, description, events = parsed
        if vid in out.index:
            raise error("idx" if hub else "vid", f"duplicate video {vid!r}")
        owner = out.item(vid, media, source)
        out.text(owner, description, "detailed")
        for e in events:
            out.text(owner, e, "event")
    return out.build("dream1k", media_root, check_media)
