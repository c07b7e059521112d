"""Shot2Story (Han et al., 2023) as a retrieval set: whole multi-shot clips or single shots."""

from __future__ import annotations

import os
import re

from vlr_plugins.data.readers._common import (
    SetBuilder,
    expect_list,
    expect_object,
    load_json,
    record_error,
    stem,
    text_field,
)
from vlr_plugins.data.retrieval_set import RetrievalSet
from vlr_plugins.errors import ConfigError, _type_name
from vlr_plugins.registry import READERS

__all__ = ["SHOT2STORY_LEVELS", "read_shot2story"]

SHOT2STORY_LEVELS = ("clip", "shot")

# a shot file is "<clip stem>_<first frame>_<last frame>.<ext>" (MVq8Q9tKdfU.23_79_485.mp4)
_SHOT_NAME = re.compile(r"^(?P<clip>.+)_(?P<start>\d+)_(?P<end>\d+)\.[^./]+$")


def _shot_id(clip_id: str, shot_name: str, index: int) -> str:
    m = _SHOT_NAME.match(os.path.basename(shot_name))
    if m and m["clip"] == clip_id:
        return f"{clip_id}#{m['start']}_{m['end']}"
    return f"{clip_id}#{index}"


@READERS.register(name="shot2story")
def read_shot2story(
    path: str | os.PathLike[str],
    *,
    level: str = "clip",
    media_root: str | os.PathLike[str] | None = None,
    check_media: bool = False,
) -> RetrievalSet:
    """Shot2Story-20K multi-shot video retrieval, whole clip (``"clip"``) or single shot (``"shot"``).

    Expects the official annotation file (``20k_test.json``, hosted at
    ``huggingface.co/datasets/mhan/shot2story``; format in the repository's ``DATA.md``): a
    JSON array with one object per multi-shot clip,

    ==================  ===============================================
    key                 used as
    ==================  ===============================================
    ``video``           the clip's file name; item id = its stem
    ``whole_caption``   the clip's summary: its text at level ``"clip"``
    ``video_names``     the shots' file names, in order
    ``captions``        one visual caption per shot, same order
    ==================  ===============================================

    Other keys (``whole_ASR``, ``audio_captions``, ``ASR``, ``id``, ...) are ignored.

    * ``level="clip"``: one item per clip (media ``video``), one ``"clip"`` text each.
    * ``level="shot"``: one item per shot (media: the shot file from ``video_names``, so
      ``media_root`` is the folder of extracted shots), one ``"shot"`` text each. The item
      id is ``<clip>#<first>_<last>``, the shot's frame span taken from its file name
      (``MVq8Q9tKdfU.23#79_485``); a shot file not named that way gets ``<clip>#<k>``, its
      0-based position. Shots whose caption is an empty string are skipped, since nothing
      can query them; a non-string caption is an error.

    ``video_names`` and ``captions`` must have the same length. Errors name the file, the
    record (0-based index into the array) and the field.

    Caveat: the frame-span naming of shot files was seen in the project's issue tracker
    (issue #10), not in ``DATA.md``; hence the positional fallback.

    Reference: Han et al., "Shot2Story: A New Benchmark for Comprehensive Understanding of
    Multi-shot Videos", 2023; whole-clip (S2S-W) and single-shot (S2S-S) retrieval as in the
    multi-view captions paper, Table 3.

    Example::

        >>> shots = read_shot2story("20k_test.json", level="shot",
        ...                         media_root="shot2story/shots")  # doctest: +SKIP
        >>> shots.item_ids[0]  # doctest: +SKIP
        'MVq8Q9tKdfU.23#79_485'
    """
    if level not in SHOT2STORY_LEVELS:
        raise ConfigError(f"level must be one of {', '.join(SHOT2STORY_LEVELS)}, found {level!r}")
    path = os.fspath(path)
    records = expect_list(path, load_json(path), "clip objects")
    out = SetBuilder(path)
    first_seen: dict[str, int] = {}
    for i, raw in enumerate(records):
        error = record_error(path, i)
        rec = expect_object(raw, error)
        video = text_field(rec, "video", error)
        clip_id = stem(video)
        if clip_id in first_seen:
            raise error(
                "video", f"duplicate clip {clip_id!r}, first seen as record {first_seen[clip_id]}"
            )
        first_seen[clip_id] = i
        if level == "clip":
            out.text(out.item(clip_id, video), text_field(rec, "whole_caption", error), "clip")
            continue
        names, captions = rec.get("video_names"), rec.get("captions")
        for field, value in (("video_names", names), ("captions", captions)):
            if not isinstance(value, list):
                raise error(
                    field, f"expected a list with one entry per shot, found {_type_name(value)}"
                )
        if len(names) != len(captions):
            raise error(
                "captions",
                f"expected one caption per shot ({len(names)} in "
                f"'video_names'), found {len(captions)}",
            )
        for k, (name, caption) in enumerate(zip(names, captions)):
            if not isinstance(name, str) or not name.strip():
                raise error(
                    f"video_names[{k}]", f"expected a non-empty string, found {_type_name(name)}"
                )
            if not isinstance(caption, str):
                raise error(f"captions[{k}]", f"expected a string, found {_type_name(caption)}")
            if not caption.strip():
                continue
            shot_id = _shot_id(clip_id, name, k)
            if shot_id in out.index:
                raise error(f"video_names[{k}]", f"duplicate shot {shot_id!r}")
            out.text(out.item(shot_id, name), caption, "shot")
    return out.build(f"shot2story-{level}", media_root, check_media)
