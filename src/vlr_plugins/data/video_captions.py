"""(video, caption) pairs in JSON Lines: the stage-I training data of CaRe (fine-grained alignment).

One JSON object per line::

    {"video": "clips/v1.mp4", "caption": "A man in a red apron slices a watermelon ...", "start": 2.5, "end": 9.0}

``video`` (a path, relative to the file's folder unless absolute) and ``caption`` (a
non-empty string) are required; ``start`` / ``end`` (seconds, optional) cut a moment out of
a longer video; ``id`` (optional) names the pair. Any other key is refused, so that a typo
(``captoin``) is not silently dropped. Tarsier's recaptions and LLaVA-Video-178k, the data
CaRe trains stage I on, reduce to this layout.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, NamedTuple

from vlr_plugins.data._text_files import json_lines
from vlr_plugins.data.sample import _Record
from vlr_plugins.errors import DataFormatError, _type_name
from vlr_plugins.registry import READERS

__all__ = ["VIDEO_CAPTION_FIELDS", "VideoCaption", "read_video_captions"]

#: the keys a record may hold; ``video`` and ``caption`` are required
VIDEO_CAPTION_FIELDS = ("video", "caption", "start", "end", "id")


class VideoCaption(NamedTuple):
    """One training pair: ``video`` (a resolved path), ``caption``, the moment ``start`` /
    ``end`` in seconds (``None``: the video's start / end), ``id``, and ``line`` (where it
    was read, for errors raised when the video is decoded)."""

    video: str
    caption: str
    start: float | None = None
    end: float | None = None
    id: str | None = None
    line: int | None = None


def _seconds(record: _Record, key: str) -> float | None:
    value = record.raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        found = _type_name(value) if isinstance(value, bool) or not isinstance(value, (int, float)) else value
        raise record.error(key, f"expected a number of seconds >= 0 or null, found {found}")
    return float(value)


def _caption(record: _Record) -> str:
    value = record.raw.get("caption")
    if value is None:
        raise record.error("caption", "missing; every record needs a video and a caption")
    if not isinstance(value, str):
        raise record.error("caption", f"expected a string, found {_type_name(value)}")
    if not value.strip():
        raise record.error("caption", "expected a non-empty caption, found an empty one")
    return value


def _pair(raw: Any, path: Path, line: int, root: Path, check_files: bool) -> VideoCaption:
    if not isinstance(raw, dict):
        raise DataFormatError(path, f"expected a JSON object, found {_type_name(raw)}", record=line)
    record = _Record(raw, path, line, "line")
    unknown = [k for k in raw if k not in VIDEO_CAPTION_FIELDS]
    if unknown:
        raise record.error(unknown[0], f"unknown field; a record holds {', '.join(VIDEO_CAPTION_FIELDS)}")
    if raw.get("video") is None:
        raise record.error("video", "missing; every record needs a video and a caption")
    video = record.media("video", root)
    caption = _caption(record)
    start, end = _seconds(record, "start"), _seconds(record, "end")
    if start is not None and end is not None and not end > start:
        raise record.error("end", f"expected end after start, found start {start:g} s, end {end:g} s")
    ident = raw.get("id")
    if ident is not None and (isinstance(ident, bool) or not isinstance(ident, (str, int))):
        raise record.error("id", f"expected a string or an integer, found {_type_name(ident)}")
    if check_files and not os.path.isfile(video):
        raise record.error("video", f"no such file: {video}")
    return VideoCaption(video, caption, start, end, None if ident is None else str(ident), line)


@READERS.register(name="video_captions")
def read_video_captions(path: str | os.PathLike[str], *, video_root: str | os.PathLike[str] | None = None,
                        check_files: bool = True) -> list[VideoCaption]:
    """Read (video, caption) pairs from a JSON Lines file (module docstring).

    Every record is checked as it is read: its keys (``video``, ``caption``, ``start``,
    ``end``, ``id``; nothing else), their types, a non-empty caption, ``end`` after
    ``start``, and (``check_files``) that the video file exists; a bad one raises
    :class:`~vlr_plugins.errors.DataFormatError` naming the file, the line and the field.
    Relative video paths are resolved against ``video_root`` (default: the file's folder).
    Whether a video decodes is known only when it is decoded (the training dataset reports
    it with the record's line).

    Example::

        pairs = read_video_captions("data/recap.jsonl", video_root="/data/videos")
        pairs[0].video, pairs[0].caption, pairs[0].start, pairs[0].end
    """
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(path, "no such file")
    root = Path(video_root) if video_root is not None else path.parent
    out = [_pair(raw, path, line, root, check_files) for line, raw in json_lines(path)]
    if not out:
        raise DataFormatError(path, "no records; expected one JSON object per line with video and caption")
    return out
