"""CaReBench (Xu et al., 2025) as a retrieval set: general, spatial and temporal captions."""

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
    text_list,
)
from vlr_plugins.data.retrieval_set import RetrievalSet
from vlr_plugins.errors import DataFormatError, _type_name
from vlr_plugins.registry import READERS

__all__ = ["CAREBENCH_CATEGORIES", "CAREBENCH_TEXT_KINDS", "read_carebench"]

#: FineAction's 4 major categories, from which CaReBench draws its 1,000 videos (paper sec. 3.1).
CAREBENCH_CATEGORIES = (
    "personal care",
    "socializing & relaxing",
    "sports & exercise",
    "household activities",
)

#: Text kind -> the annotation field it comes from.
CAREBENCH_TEXT_KINDS = {
    "general": "caption",
    "spatial": "spatial_caption",
    "temporal": "temporal_caption",
}


@READERS.register(name="carebench")
def read_carebench(
    path: str | os.PathLike[str],
    *,
    media_root: str | os.PathLike[str] | None = None,
    check_media: bool = False,
    category_field: str = "category",
) -> RetrievalSet:
    """CaReBench fine-grained video retrieval: 1,000 videos, one general, one spatial and one
    temporal caption each.

    Expects the benchmark's ``json/metadata.json`` as published on the Hugging Face hub
    (``MCG-NJU/CaReBench``): a JSON array with one object per video,

    ======================  =========================================  ============
    key                     meaning                                    text kind
    ======================  =========================================  ============
    ``video``               file name under ``videos/``                (item id: stem)
    ``caption``             Stage-I detailed caption (4 aspects)       ``"general"``
    ``spatial_caption``     Stage-II spatial-only caption              ``"spatial"``
    ``temporal_caption``    Stage-II temporal-only caption             ``"temporal"``
    ``category_field``      the video's major category (see caveat)    ``categories``
    ======================  =========================================  ============

    Other keys (``events``, ``objects``, ...) are ignored. ``caption`` may also be a list
    (as CaReBench's ``VideoTextDataset`` allows); each entry is then a general text. Every
    record needs all three captions, so that ``with_texts("spatial")`` and
    ``with_texts("temporal")`` score the same 1,000 videos. Errors name the file, the
    record (0-based index into the array) and the field; with ``check_media`` every
    missing video is listed at once.

    Caveat (guessed, not verified): the name of the major-category key. The paper names
    FineAction's 4 major categories (:data:`CAREBENCH_CATEGORIES`), and the published
    ``video``/``caption``/``spatial_caption``/``temporal_caption`` keys were checked against
    code that reads ``metadata.json``, but no public source showed the category key; it is
    read from ``category_field`` (default ``"category"``). A file without that key gives
    ``categories=None``; a file where only some records have it is an error.

    Reference: Xu et al., "CaReBench: A Fine-Grained Benchmark for Video Captioning and
    Retrieval", 2025 (sec. 3; general retrieval uses the Stage-I captions, spatial and
    temporal retrieval the Stage-II ones, Tables 3-4).

    Relations: ``with_texts("spatial")`` / ``with_texts("temporal")`` give the CARE-S /
    CARE-T sets that ReBias compares.

    Example::

        >>> care = read_carebench("CaReBench/json/metadata.json",
        ...                       media_root="CaReBench/videos")  # doctest: +SKIP
        >>> care.kinds(), len(care.with_texts("temporal"))  # doctest: +SKIP
        (['general', 'spatial', 'temporal'], 1000)
    """
    path = os.fspath(path)
    records = expect_list(path, load_json(path), "video objects")
    out = SetBuilder(path)
    first_category: int | None = None
    first_without: int | None = None
    for i, raw in enumerate(records):
        error = record_error(path, i)
        rec = expect_object(raw, error)
        video = text_field(rec, "video", error)
        general = text_list(rec, "caption", error, allow_str=True)
        spatial = text_field(rec, "spatial_caption", error)
        temporal = text_field(rec, "temporal_caption", error)
        category = rec.get(category_field)
        if category is None:
            first_without = i if first_without is None else first_without
        elif not isinstance(category, str) or not category.strip():
            found = "an empty string" if category == "" else _type_name(category)
            raise error(category_field, f"expected a non-empty string, found {found}")
        else:
            first_category = i if first_category is None else first_category
        if first_category is not None and first_without is not None:
            raise DataFormatError(
                path,
                f"some records have a category and some do not (first with one: record "
                f"{first_category}, first without: record {first_without})",
                record=i,
                field=category_field,
                record_kind="record",
            )
        item_id = stem(video)
        if item_id in out.index:
            raise error(
                "video", f"duplicate video {item_id!r}, first seen as record {out.index[item_id]}"
            )
        owner = out.item(item_id, video, category)
        for g in general:
            out.text(owner, g, "general")
        out.text(owner, spatial, "spatial")
        out.text(owner, temporal, "temporal")
    return out.build("carebench", media_root, check_media)
