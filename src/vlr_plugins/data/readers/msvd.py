"""MSVD (Chen & Dolan, 2011) as a retrieval set, from its text or JSON annotations (never a pickle)."""

from __future__ import annotations

import os

from vlr_plugins.data.readers._common import SetBuilder, load_json, reject_pickle, text_lines
from vlr_plugins.data.readers._vindlu import caption_list_set
from vlr_plugins.data.retrieval_set import RetrievalSet
from vlr_plugins.errors import DataFormatError
from vlr_plugins.registry import READERS

__all__ = ["read_msvd"]

_TEXT_FORMS = (
    "AllVideoDescriptions.txt (with split_list=test_list.txt) or a VindLU/UMT-style "
    "JSON ([{'video': ..., 'caption': [...]}])"
)


def _descriptions(path: str) -> dict[str, list[str]]:
    """``AllVideoDescriptions.txt``: ``<clip id> <sentence>`` per line, ``#`` lines are comments."""
    captions: dict[str, list[str]] = {}
    for line_no, line in text_lines(path):
        if line.startswith("#"):
            continue
        clip, _, sentence = line.strip().partition(" ")
        if not sentence.strip():
            raise DataFormatError(
                path,
                f"expected '<clip id> <sentence>', found no sentence after {clip!r}",
                record=line_no,
                field="sentence",
            )
        captions.setdefault(clip, []).append(sentence.strip())
    return captions


def _split_ids(split_list: str) -> list[tuple[int, str]]:
    ids = [(line_no, line.strip()) for line_no, line in text_lines(split_list)]
    if not ids:
        raise DataFormatError(split_list, "no clip ids")
    return ids


@READERS.register(name="msvd")
def read_msvd(
    path: str | os.PathLike[str],
    *,
    split_list: str | os.PathLike[str] | None = None,
    media_root: str | os.PathLike[str] | None = None,
    check_media: bool = False,
    video_ext: str = ".avi",
) -> RetrievalSet:
    """MSVD text-video retrieval: the 670-clip test split, ~40 English sentences per clip.

    Reads, by suffix:

    * ``.txt``: the publisher's ``AllVideoDescriptions.txt`` (UT Austin release), one
      ``<clip id> <sentence>`` per line, ``#`` comment lines skipped; restricted to the
      clips of ``split_list`` (collaborative-experts' ``test_list.txt``, one clip id per
      line, in that order). Without ``split_list`` every described clip is an item;
    * ``.json``: the VindLU/UMT-style ``msvd_ret_test.json``,
      ``[{"video": "<clip>.avi", "caption": [...]}, ...]``;
    * ``.pkl`` / ``.pickle`` (CLIP4Clip's ``raw-captions.pkl``): refused, since unpickling
      can run arbitrary code. That file is the same sentences tokenized; use
      ``AllVideoDescriptions.txt`` with ``test_list.txt`` instead.

    Item ids are the clip ids (``-4wsuPCjDBc_5_15``); media is ``<clip id>.avi``
    (``video_ext``) under ``media_root`` (the ``YouTubeClips`` folder). Text kind:
    ``"caption"``. A split clip with no sentence is an error naming the split-list line;
    errors in the annotation name its line (or JSON record) and field. With
    ``check_media`` every missing clip is listed at once.

    Caveat: CLIP4Clip joins the tokens of ``raw-captions.pkl`` with spaces, so its texts
    differ from the raw sentences here in punctuation spacing; the clips and the number
    of sentences per clip should match (not verified against the pickle, which we do not
    open).

    Reference: Chen & Dolan, "Collecting Highly Parallel Data for Paraphrase Evaluation",
    ACL 2011; split of Venugopalan et al. (1,200/100/670) as used by CLIP4Clip.

    Example::

        >>> msvd = read_msvd("AllVideoDescriptions.txt", split_list="test_list.txt",
        ...                  media_root="YouTubeClips")  # doctest: +SKIP
        >>> len(msvd)  # doctest: +SKIP
        670
    """
    path = os.fspath(path)
    reject_pickle(path, _TEXT_FORMS)
    if path.lower().endswith(".json"):
        out = caption_list_set(path, load_json(path), kind="caption", paragraph=False)
        return out.build("msvd", media_root, check_media)
    captions = _descriptions(path)
    if split_list is None:
        wanted = list(enumerate(captions, start=1))
        split_path = path
    else:
        split_path = os.fspath(split_list)
        reject_pickle(split_path, "a text file with one clip id per line")
        wanted = _split_ids(split_path)
    out = SetBuilder(path)
    for line_no, clip in wanted:
        if clip not in captions:
            raise DataFormatError(
                split_path,
                f"clip {clip!r} has no sentence in {path}",
                record=line_no,
                field="clip id",
            )
        if clip in out.index:
            raise DataFormatError(
                split_path, f"duplicate clip {clip!r}", record=line_no, field="clip id"
            )
        owner = out.item(clip, f"{clip}{video_ext}")
        for sentence in captions[clip]:
            out.text(owner, sentence, "caption")
    return out.build("msvd", media_root, check_media)
