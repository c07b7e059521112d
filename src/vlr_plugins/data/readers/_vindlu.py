"""The VindLU/UMT annotation JSON, ``[{"video": ..., "caption": str | [str, ...]}, ...]``.

Several video publishers ship this shape, and CaReBench's own ``VideoTextDataset`` reads it
for MSR-VTT, MSVD and DiDeMo; it lives here once instead of in five readers.
"""

from __future__ import annotations

from typing import Any

from vlr_plugins.data.readers._common import (
    SetBuilder,
    expect_list,
    expect_object,
    record_error,
    stem,
    text_field,
    text_list,
)


def join_paragraph(sentences: list[str]) -> str:
    """Sentences as one paragraph, as CLIP4Clip and VindLU/UMT do (``" ".join``), stray spaces trimmed."""
    return " ".join(s.strip() for s in sentences)


def caption_list_set(path: str, data: Any, *, kind: str, paragraph: bool) -> SetBuilder:
    """The VindLU/UMT (and CaReBench ``VideoTextDataset``) JSON: ``[{"video", "caption"}, ...]``.

    ``caption`` is one string or a list. With ``paragraph`` a list becomes one text, its
    sentences joined in file order (VindLU's ``is_paragraph_retrieval``); otherwise each
    caption is a text. Records naming the same video add texts to one item, whose id is
    the file's stem and whose media is ``video`` as written.
    """
    records = expect_list(path, data, "{'video': ..., 'caption': ...} objects")
    out = SetBuilder(path)
    for i, raw in enumerate(records):
        error = record_error(path, i)
        rec = expect_object(raw, error)
        video = text_field(rec, "video", error)
        captions = text_list(rec, "caption", error, allow_str=True)
        owner = out.item(stem(video), video)
        if paragraph:
            out.text(owner, join_paragraph(captions), kind)
        else:
            for c in captions:
                out.text(owner, c, kind)
    return out
