"""Karpathy's ``dataset_{flickr30k,coco}.json``, the split files read by the Flickr30k and COCO readers."""

from __future__ import annotations

import os
from typing import Any

from vlr_plugins.data.readers._common import (
    build_set,
    expect_object,
    one_of,
    record_error,
    stem,
    text_value,
)
from vlr_plugins.data.retrieval_set import RetrievalSet
from vlr_plugins.errors import ConfigError, DataFormatError, _type_name

#: The split labels of Karpathy's ``dataset_*.json`` files (``restval`` only in COCO's).
KARPATHY_SPLITS = ("train", "val", "test", "restval")


def karpathy_set(
    path: str,
    data: Any,
    split: str,
    *,
    dataset: str,
    name: str,
    media_root: str | os.PathLike[str] | None,
    check_media: bool,
) -> RetrievalSet:
    """Karpathy's ``dataset_{flickr30k,coco}.json``: ``{"images": [...], "dataset": ...}``.

    ``media`` is ``filepath/filename`` (COCO's ``val2014/COCO_val2014_...jpg``) or just
    ``filename`` where the file has no ``filepath`` (Flickr30k).
    """
    if split != "all" and split not in KARPATHY_SPLITS:
        raise ConfigError(
            f"split must be one of {', '.join(KARPATHY_SPLITS)} or 'all', found {split!r}"
        )
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        found = _type_name(data.get("images")) if isinstance(data, dict) else _type_name(data)
        raise DataFormatError(
            path, f"expected Karpathy's {{'images': [...]}}, found {found}", field="images"
        )
    if data.get("dataset") not in (None, dataset):
        raise DataFormatError(
            path,
            f"expected Karpathy's {dataset} file, found the {data['dataset']!r} one",
            field="dataset",
        )

    ids: list[str] = []
    media: list[str] = []
    texts: list[str] = []
    owner: list[int] = []
    first_seen: dict[str, int] = {}
    for i, raw in enumerate(data["images"]):
        error = record_error(path, i, "image")
        rec = expect_object(raw, error)
        filename = text_value(rec.get("filename"), "filename", error)
        filepath = rec.get("filepath", "")
        if not isinstance(filepath, str):
            raise error("filepath", f"expected a string, found {_type_name(filepath)}")
        one_of(rec.get("split"), KARPATHY_SPLITS, "split", error)
        sentences = rec.get("sentences")
        if not isinstance(sentences, list) or not sentences:
            found = "an empty list" if sentences == [] else _type_name(sentences)
            raise error("sentences", f"expected a non-empty list of objects, found {found}")
        for j, s in enumerate(sentences):
            text_value(s.get("raw") if isinstance(s, dict) else None, f"sentences[{j}].raw", error)
        item_id = stem(filename)
        if item_id in first_seen:
            raise error(
                "filename",
                f"duplicate image {item_id!r}, first seen as image {first_seen[item_id]}",
            )
        first_seen[item_id] = i
        if split != "all" and rec["split"] != split:
            continue
        owner.extend([len(ids)] * len(sentences))
        texts.extend(s["raw"] for s in sentences)
        media.append(f"{filepath}/{filename}" if filepath else filename)
        ids.append(item_id)
    if not ids and first_seen:
        present = sorted({r["split"] for r in data["images"]})
        raise DataFormatError(
            path, f"no images with split {split!r}; splits present: {', '.join(present)}"
        )
    return build_set(name, path, ids, media, texts, owner, media_root, check_media)
