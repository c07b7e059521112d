"""MSR-VTT (Xu et al., 2016) as a retrieval set: the 1k-A test split, or a split of the full data."""

from __future__ import annotations

import csv
import os
from typing import Any

from vlr_plugins.data._text_files import utf8_lines
from vlr_plugins.data.readers._common import (
    SetBuilder,
    expect_list_fields,
    expect_object,
    load_json,
    record_error,
    text_field,
)
from vlr_plugins.data.readers._vindlu import caption_list_set
from vlr_plugins.data.retrieval_set import RetrievalSet
from vlr_plugins.errors import DataFormatError
from vlr_plugins.registry import READERS

__all__ = ["read_msrvtt"]

_JSFUSION_COLUMNS = ("video_id", "sentence")


def _jsfusion(path: str, video_ext: str) -> SetBuilder:
    """CLIP4Clip's ``MSRVTT_JSFUSION_test.csv``: ``key,vid_key,video_id,sentence`` per row."""
    out = SetBuilder(path)
    reader = csv.DictReader(line for _, line in utf8_lines(path))
    missing = [c for c in _JSFUSION_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise DataFormatError(
            path,
            f"expected a header with columns key,vid_key,video_id,"
            f"sentence, found {','.join(reader.fieldnames or []) or 'none'}",
            record=1,
            field=missing[0],
        )
    for row in reader:
        line = reader.line_num
        if None in row:
            raise DataFormatError(
                path,
                f"expected {len(reader.fieldnames)} columns, found more "
                "(quote sentences that hold commas)",
                record=line,
            )
        error = record_error(path, line, "line")
        video_id = text_field(row, "video_id", error)
        sentence = text_field(row, "sentence", error)
        out.text(out.item(video_id, f"{video_id}{video_ext}"), sentence, "caption")
    return out


def _msrvtt_data(path: str, data: dict[str, Any], split: str, video_ext: str) -> SetBuilder:
    """The full ``MSRVTT_data.json``: ``{"videos": [{video_id, split, category}], "sentences": [...]}``."""
    expect_list_fields(path, data, ("videos", "sentences"))
    out = SetBuilder(path)
    splits: set[str] = set()
    for i, raw in enumerate(data["videos"]):
        error = record_error(path, i, "video")
        rec = expect_object(raw, error)
        video_id = text_field(rec, "video_id", error)
        rec_split = text_field(rec, "split", error)
        splits.add(rec_split)
        if rec_split == split:
            category = rec.get("category")
            out.item(
                video_id, f"{video_id}{video_ext}", None if category is None else str(category)
            )
    if not out.ids:
        raise DataFormatError(
            path,
            f"no videos with split {split!r}; splits present: "
            f"{', '.join(sorted(splits)) or 'none'}",
            field="videos",
        )
    for i, raw in enumerate(data["sentences"]):
        error = record_error(path, i, "sentence")
        rec = expect_object(raw, error)
        video_id = text_field(rec, "video_id", error)
        caption = text_field(rec, "caption", error)
        if video_id in out.index:
            out.text(out.index[video_id], caption, "caption")
    owners = set(out.owner)
    bare = [v for k, v in enumerate(out.ids) if k not in owners]
    if bare:
        raise DataFormatError(
            path,
            f"{len(bare)} {split} videos have no sentence, e.g. {', '.join(bare[:5])}",
            field="sentences",
        )
    return out


@READERS.register(name="msrvtt")
def read_msrvtt(
    path: str | os.PathLike[str],
    *,
    split: str = "test",
    media_root: str | os.PathLike[str] | None = None,
    check_media: bool = False,
    video_ext: str = ".mp4",
) -> RetrievalSet:
    """MSR-VTT text-video retrieval; by default the 1k-A test split (1,000 videos, 1 text each).

    Reads, by content:

    * ``MSRVTT_JSFUSION_test.csv`` (CLIP4Clip's ``msrvtt_data.zip``): a CSV with header
      ``key,vid_key,video_id,sentence``, one row per text: the standard 1k-A split;
    * ``MSRVTT_data.json`` (the same zip): ``{"videos": [{"video_id", "split", "category",
      ...}], "sentences": [{"video_id", "caption", "sen_id"}]}``; the videos of ``split``
      (``"train"``, ``"validate"`` or ``"test"``: the full 2,990-video test set with 20
      sentences each), with the video's category (0-19, as a string) in ``categories``;
    * VindLU/UMT ``msrvtt_test1k.json``: ``[{"video": "video7020.mp4", "caption": ...}]``.

    Item ids are the video ids (``video7020``); media is ``<video_id>.mp4`` (``video_ext``)
    under ``media_root``, the layout of Frozen-in-Time's ``MSRVTT.zip``. Text kind:
    ``"caption"``. Errors name the file, the line (CSV, header = line 1) or record (JSON,
    0-based) and the field; with ``check_media`` every missing video is listed at once.

    Reference: Xu et al., "MSR-VTT: A Large Video Description Dataset for Bridging Video and
    Language", CVPR 2016; 1k-A split of Yu et al. (JSFusion), ECCV 2018, as in CLIP4Clip.

    Example::

        >>> msrvtt = read_msrvtt("msrvtt_data/MSRVTT_JSFUSION_test.csv",
        ...                      media_root="MSRVTT/videos/all")  # doctest: +SKIP
        >>> len(msrvtt), len(msrvtt.texts)  # doctest: +SKIP
        (1000, 1000)
    """
    path = os.fspath(path)
    if path.lower().endswith(".csv"):
        out, name = _jsfusion(path, video_ext), "msrvtt-1ka"
    else:
        data = load_json(path)
        if isinstance(data, dict):
            out, name = _msrvtt_data(path, data, split, video_ext), f"msrvtt-{split}"
        else:
            out, name = caption_list_set(path, data, kind="caption", paragraph=False), "msrvtt"
    return out.build(name, media_root, check_media)
