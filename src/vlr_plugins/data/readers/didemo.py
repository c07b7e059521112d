"""DiDeMo (Hendricks et al., 2017) as a paragraph-to-video retrieval set."""

from __future__ import annotations

import os

from vlr_plugins.data.readers._common import (
    SetBuilder,
    expect_list,
    expect_object,
    load_json,
    record_error,
    stem,
    text_field,
)
from vlr_plugins.data.readers._vindlu import caption_list_set, join_paragraph
from vlr_plugins.data.retrieval_set import RetrievalSet
from vlr_plugins.errors import _type_name
from vlr_plugins.registry import READERS

__all__ = ["read_didemo"]


def _localizing_moments(path: str, records: list) -> SetBuilder:
    """LocalizingMoments' ``{train,val,test}_data.json``: one record per moment description."""
    sentences: dict[str, list[str]] = {}
    media: dict[str, str] = {}
    for i, raw in enumerate(records):
        error = record_error(path, i)
        rec = expect_object(raw, error)
        video = text_field(rec, "video", error)
        description = text_field(rec, "description", error)
        times = rec.get("times")
        if not isinstance(times, list) or not times:
            raise error(
                "times",
                f"expected a non-empty list of [start, end] chunk pairs, found {_type_name(times)}",
            )
        media.setdefault(stem(video), video)
        sentences.setdefault(stem(video), []).append(description)
    out = SetBuilder(path)
    for video_id, video_sentences in sentences.items():
        out.text(out.item(video_id, media[video_id]), join_paragraph(video_sentences), "paragraph")
    return out


@READERS.register(name="didemo")
def read_didemo(
    path: str | os.PathLike[str],
    *,
    media_root: str | os.PathLike[str] | None = None,
    check_media: bool = False,
) -> RetrievalSet:
    """DiDeMo paragraph-to-video retrieval: each video's moment descriptions as one paragraph.

    Reads, by content:

    * the official ``test_data.json`` (``LisaAnne/LocalizingMoments``, ``data/``): a JSON
      array of moment records ``{"video", "description", "times", "annotation_id",
      "num_segments", "dl_link"}``; a video's descriptions are joined with spaces in file
      order into one ``"paragraph"`` text, as CLIP4Clip's DiDeMo loader does;
    * VindLU/UMT ``didemo_ret_test.json``: ``[{"video", "caption": [...]}]``, the caption
      list joined in its order (VindLU's ``is_paragraph_retrieval``).

    Items are the videos in order of first appearance; the item id is the file's stem and
    the media is ``video`` as written (DiDeMo's files keep their Flickr extensions:
    ``.mp4``, ``.m4v``, ``.avi``, ``.mpg``, ...). Each ``times`` entry must be a non-empty
    list (it is not used: the paragraph covers the whole video, truncated at 30 s by the
    annotators). Errors name the file, the record (0-based) and the field.

    Reference: Hendricks et al., "Localizing Moments in Video with Natural Language", ICCV
    2017; paragraph-to-video retrieval as in CLIP4Clip (Luo et al., 2021) and VindLU/UMT.

    Example::

        >>> didemo = read_didemo("LocalizingMoments/data/test_data.json",
        ...                      media_root="DiDeMo/videos")  # doctest: +SKIP
        >>> didemo.kinds()  # doctest: +SKIP
        ['paragraph']
    """
    path = os.fspath(path)
    records = expect_list(path, load_json(path), "moment or video objects")
    first = records[0]
    if isinstance(first, dict) and "caption" in first and "description" not in first:
        out = caption_list_set(path, records, kind="paragraph", paragraph=True)
    else:
        out = _localizing_moments(path, records)
    return out.build("didemo", media_root, check_media)
