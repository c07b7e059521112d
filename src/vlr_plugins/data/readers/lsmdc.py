"""LSMDC (Rohrbach et al., 2015/2017) as a retrieval set: the LSMDC16 1,000-clip public test."""

from __future__ import annotations

import os

from vlr_plugins.data.readers._common import SetBuilder, first_char, load_json, text_lines
from vlr_plugins.data.readers._vindlu import caption_list_set
from vlr_plugins.data.retrieval_set import RetrievalSet
from vlr_plugins.errors import DataFormatError
from vlr_plugins.registry import READERS

__all__ = ["read_lsmdc"]

_COLUMNS = (
    "clip id",
    "start aligned",
    "end aligned",
    "start extracted",
    "end extracted",
    "sentence",
)


def _movie_folder(clip_id: str) -> str:
    # "1004_Juno_00.00.30.312-00.00.33.112" lives in "1004_Juno/"
    movie, sep, _span = clip_id.rpartition("_")
    return movie if sep else ""


def _tsv(path: str, video_ext: str) -> SetBuilder:
    """``LSMDC16_challenge_1000_publictect.csv``: 6 tab-separated fields per line, no header."""
    out = SetBuilder(path)
    for line_no, line in text_lines(path):
        fields = line.rstrip("\r\n").split("\t")
        if len(fields) != len(_COLUMNS):
            raise DataFormatError(
                path,
                f"expected {len(_COLUMNS)} tab-separated fields "
                f"({', '.join(_COLUMNS)}), found {len(fields)}",
                record=line_no,
            )
        clip_id, sentence = fields[0].strip(), fields[-1]
        for name, value in (("clip id", clip_id), ("sentence", sentence)):
            if not value.strip():
                raise DataFormatError(
                    path,
                    "expected a non-empty string, found an empty one",
                    record=line_no,
                    field=name,
                )
        media = os.path.join(_movie_folder(clip_id), f"{clip_id}{video_ext}")
        out.text(out.item(clip_id, media), sentence, "caption")
    return out


@READERS.register(name="lsmdc")
def read_lsmdc(
    path: str | os.PathLike[str],
    *,
    media_root: str | os.PathLike[str] | None = None,
    check_media: bool = False,
    video_ext: str = ".avi",
) -> RetrievalSet:
    """LSMDC text-to-clip retrieval: the LSMDC16 public test, 1,000 movie clips, 1 sentence each.

    Reads, by content:

    * ``LSMDC16_challenge_1000_publictect.csv`` (MPII, download needs permission): despite
      the suffix, tab-separated, no header, six fields per line
      ``<clip id> <start aligned> <end aligned> <start extracted> <end extracted>
      <sentence>``, as CLIP4Clip's LSMDC loader parses it;
    * a VindLU/UMT-style JSON ``[{"video", "caption"}]``.

    Item ids are the clip ids; a clip id repeated on several lines gets all their
    sentences (the public test has no repeats). Text kind: ``"caption"``. Errors name the
    file, the line (or JSON record) and the field; with ``check_media`` every missing clip
    is listed at once.

    Caveat (guessed): media is ``<movie>/<clip id>.avi`` (``video_ext``) under
    ``media_root``, with ``<movie>`` the clip id up to its last ``_``
    (``1004_Juno/1004_Juno_00.00.30.312-00.00.33.112.avi``), the folder layout we believe
    MPII's clip archives use; CLIP4Clip instead searches the whole video folder for
    ``<clip id>.*``. The JSON form keeps ``video`` as written.

    Reference: Rohrbach et al., "Movie Description", IJCV 2017 (LSMDC); 1,000-clip test
    as in CLIP4Clip and the multi-view captions paper.

    Example::

        >>> lsmdc = read_lsmdc("LSMDC16_challenge_1000_publictect.csv",
        ...                    media_root="LSMDC/avi")  # doctest: +SKIP
        >>> len(lsmdc)  # doctest: +SKIP
        1000
    """
    path = os.fspath(path)
    if path.lower().endswith(".json") or first_char(path) == "[":
        out = caption_list_set(path, load_json(path), kind="caption", paragraph=False)
    else:
        out = _tsv(path, video_ext)
    return out.build("lsmdc", media_root, check_media)
