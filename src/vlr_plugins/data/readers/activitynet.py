"""ActivityNet Captions (Krishna et al., 2017) as a paragraph-to-video retrieval set."""

from __future__ import annotations

import math
import os
from typing import Any

from vlr_plugins.data.readers._common import (
    ErrorFn,
    SetBuilder,
    expect_object,
    load_json,
    record_error,
    text_list,
)
from vlr_plugins.data.readers._vindlu import caption_list_set, join_paragraph
from vlr_plugins.data.retrieval_set import RetrievalSet
from vlr_plugins.errors import _type_name
from vlr_plugins.registry import READERS

__all__ = ["read_activitynet"]


def _starts(value: Any, n: int, error: ErrorFn) -> list[float]:
    if not isinstance(value, list) or len(value) != n:
        found = f"{len(value)} entries" if isinstance(value, list) else _type_name(value)
        raise error(
            "timestamps", f"expected one [start, end] pair per sentence ({n}), found {found}"
        )
    starts: list[float] = []
    for k, pair in enumerate(value):
        ok = (
            isinstance(pair, list)
            and len(pair) == 2
            and all(
                isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t)
                for t in pair
            )
        )
        if not ok:
            raise error(f"timestamps[{k}]", f"expected [start, end] in seconds, found {pair!r}")
        starts.append(float(pair[0]))
    return starts


def _captions_json(path: str, data: dict[str, Any], video_ext: str, strip_v: bool) -> SetBuilder:
    """The official ``val_1.json``: ``{video id: {"duration", "timestamps", "sentences"}}``."""
    out = SetBuilder(path)
    for video_id, raw in data.items():
        error = record_error(path, repr(video_id), "video")
        rec = expect_object(raw, error)
        sentences = text_list(rec, "sentences", error)
        starts = _starts(rec.get("timestamps"), len(sentences), error)
        # sorted() is stable: sentences that start together keep their file order
        order = sorted(range(len(sentences)), key=starts.__getitem__)
        paragraph = join_paragraph([sentences[k] for k in order])
        file_id = video_id.removeprefix("v_") if strip_v else video_id
        out.text(out.item(video_id, f"{file_id}{video_ext}"), paragraph, "paragraph")
    return out


@READERS.register(name="activitynet")
def read_activitynet(
    path: str | os.PathLike[str],
    *,
    media_root: str | os.PathLike[str] | None = None,
    check_media: bool = False,
    video_ext: str = ".mp4",
    strip_v_prefix: bool = False,
) -> RetrievalSet:
    """ActivityNet Captions paragraph-to-video retrieval (``val_1``: ~4,900 videos).

    Reads, by content:

    * the official ``val_1.json`` (Krishna et al.'s dense-captioning release): a JSON object
      ``{"v_<youtube id>": {"duration": s, "timestamps": [[start, end], ...],
      "sentences": [...]}}``; a video's sentences are joined with spaces in order of their
      start time (ties keep file order) into one ``"paragraph"`` text;
    * VindLU/UMT ``anet_ret_val_1.json``: ``[{"video", "caption": [...]}]``, the caption
      list joined in its order.

    Item ids are the keys as written (``v_QOlSCBRmfWY``) or, for the VindLU form, the
    video's stem; media is ``<id>.mp4`` (``video_ext``; without the ``v_`` if
    ``strip_v_prefix``, the file names CLIP4Clip's loader expects) or ``video``, under
    ``media_root``.
    ``timestamps`` must hold one finite ``[start, end]`` pair per sentence. Errors name the
    file, the video (``video 'v_x'``) or record and the field; with ``check_media`` every
    missing video is listed at once.

    Caveat: the official files appear to list sentences in time order already (CLIP4Clip
    joins in file order), so sorting should change nothing there; not checked on the full
    file. How video files are named depends on how they were downloaded, hence
    ``video_ext`` / ``strip_v_prefix``.

    Reference: Krishna et al., "Dense-Captioning Events in Videos", ICCV 2017;
    paragraph-to-video retrieval as in CLIP4Clip and VindLU/UMT.

    Example::

        >>> anet = read_activitynet("captions/val_1.json", media_root="ActivityNet/videos")  # doctest: +SKIP
        >>> anet.texts[0][:40]  # doctest: +SKIP
        'A young woman is seen standing in a room'
    """
    path = os.fspath(path)
    data = load_json(path)
    if isinstance(data, dict):
        out = _captions_json(path, data, video_ext, strip_v_prefix)
    else:
        out = caption_list_set(path, data, kind="paragraph", paragraph=True)
    return out.build("activitynet", media_root, check_media)
