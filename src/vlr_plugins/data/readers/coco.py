"""MS-COCO captions as a retrieval set: the official 2017 files, and Karpathy's 5K test split."""

from __future__ import annotations

import json
import os
from typing import Any

from vlr_plugins.data.readers._common import (
    ErrorFn,
    build_set,
    expect_list_fields,
    expect_object,
    load_json,
    record_error,
    stem,
    text_value,
)
from vlr_plugins.data.readers._karpathy import karpathy_set
from vlr_plugins.data.retrieval_set import RetrievalSet
from vlr_plugins.errors import DataFormatError, _type_name
from vlr_plugins.registry import READERS

__all__ = ["read_coco_captions", "read_coco_karpathy"]


def _int_field(rec: dict[str, Any], field: str, error: ErrorFn) -> int:
    value = rec.get(field)
    if not isinstance(value, int) or isinstance(value, bool):
        raise error(field, f"expected an integer, found {json.dumps(value)}")
    return value


@READERS.register(name="coco_captions")
def read_coco_captions(
    path: str | os.PathLike[str],
    *,
    media_root: str | os.PathLike[str] | None = None,
    check_media: bool = False,
) -> RetrievalSet:
    """COCO captions from the official ``captions_{train,val}2017.json``, every image and caption.

    Expects the COCO annotation layout::

        {"images": [{"id": 139, "file_name": "000000000139.jpg", ...}, ...],
         "annotations": [{"image_id": 139, "id": 1, "caption": "..."}, ...], ...}

    The paper uses the whole of train2017: 118,287 images, ~592K captions (most images
    have 5, some 6-7; all are kept). Items follow the order of ``images``; each item's
    captions follow the order of ``annotations``. Item ids are file names without
    extension (``"000000000139"``, as :func:`~vlr_plugins.precompute.list_images` names them),
    ``media`` the file name relative to ``media_root`` (``coco/train2017/``). Captions
    are kept as published (some end in spaces or a newline).

    Errors name the file, the record (``image i`` = ``images[i]``, ``annotation k`` =
    ``annotations[k]``, 0-based) and the field: a caption whose ``image_id`` is not in
    ``images``, an image no caption points to, repeated image ids, wrong types.
    ``check_media=True`` raises one ``FileNotFoundError`` listing every missing image.
    The set is named ``coco-train2017`` / ``coco-val2017`` after the file.

    Reference: Chen et al. 2015, "Microsoft COCO Captions: Data Collection and Evaluation
    Server".

    Relations: :func:`read_coco_karpathy` reads Karpathy's 5K test split (2014 images);
    returns a :class:`~vlr_plugins.data.RetrievalSet` like every reader.

    Example::

        >>> rs = read_coco_captions("annotations/captions_train2017.json",
        ...                         media_root="coco/train2017")  # doctest: +SKIP
        >>> rs.name, len(rs)  # doctest: +SKIP
        ('coco-train2017', 118287)
    """
    path = os.fspath(path)
    data = load_json(path, line_as_record=False)
    if not isinstance(data, dict):
        raise DataFormatError(
            path,
            f"expected COCO's {{'images': [...], 'annotations': [...]}}, found {_type_name(data)}",
        )
    expect_list_fields(path, data, ("images", "annotations"))

    ids: list[str] = []
    media: list[str] = []
    index: dict[int, int] = {}
    first_stem: dict[str, int] = {}
    for i, raw in enumerate(data["images"]):
        error = record_error(path, i, "image")
        rec = expect_object(raw, error)
        image_id = _int_field(rec, "id", error)
        file_name = text_value(rec.get("file_name"), "file_name", error)
        if image_id in index:
            raise error(
                "id", f"duplicate image id {image_id}, first seen as image {index[image_id]}"
            )
        item_id = stem(file_name)
        if item_id in first_stem:
            raise error(
                "file_name",
                f"duplicate file {file_name!r}, first seen as image {first_stem[item_id]}",
            )
        index[image_id] = i
        first_stem[item_id] = i
        ids.append(item_id)
        media.append(file_name)

    captions: list[list[str]] = [[] for _ in ids]
    for k, raw in enumerate(data["annotations"]):
        error = record_error(path, k, "annotation")
        ann = expect_object(raw, error)
        image_id = _int_field(ann, "image_id", error)
        if image_id not in index:
            raise error("image_id", f"no image with id {image_id} in 'images'")
        captions[index[image_id]].append(text_value(ann.get("caption"), "caption", error))

    bare = [i for i, c in enumerate(captions) if not c]
    if bare:
        i = bare[0]
        others = f" ({len(bare)} images have none)" if len(bare) > 1 else ""
        raise DataFormatError(
            path,
            f"image id {data['images'][i]['id']} has no caption in 'annotations'{others}",
            record=i,
            field="id",
            record_kind="image",
        )

    texts = [c for cs in captions for c in cs]
    owner = [i for i, cs in enumerate(captions) for _ in cs]
    base = stem(path)
    name = f"coco-{base.removeprefix('captions_')}" if base.startswith("captions_") else "coco"
    return build_set(name, path, ids, media, texts, owner, media_root, check_media)


@READERS.register(name="coco_karpathy")
def read_coco_karpathy(
    path: str | os.PathLike[str],
    split: str = "test",
    *,
    media_root: str | os.PathLike[str] | None = None,
    check_media: bool = False,
) -> RetrievalSet:
    """COCO from Karpathy's ``dataset_coco.json``; ``split="test"`` is the usual 5K test set.

    Expects ``{"images": [{"filepath": "val2014", "filename": "COCO_val2014_...jpg",
    "split": ..., "sentences": [{"raw": ...}, ...]}, ...], "dataset": "coco"}``.
    ``split`` is ``"train"`` (82,783), ``"restval"`` (30,504), ``"val"`` (5K), ``"test"``
    (5K) or ``"all"``. Item ids are file names without extension; ``media`` is
    ``filepath/filename``, relative to ``media_root`` = the folder holding ``train2014/``
    and ``val2014/``. Captions are the ``raw`` sentences, usually 5 per image.

    Errors name the file, ``image i`` (= ``images[i]``) and the field; a file of another
    dataset (``"dataset": "flickr30k"``) is refused. ``check_media=True`` raises one
    ``FileNotFoundError`` listing every missing image.

    Reference: Karpathy & Fei-Fei 2015, "Deep Visual-Semantic Alignments for Generating
    Image Descriptions".

    Relations: same file layout as :func:`~vlr_plugins.data.readers.read_flickr30k`'s
    Karpathy input; :func:`read_coco_captions` reads the official 2017 files.

    Example::

        >>> rs = read_coco_karpathy("dataset_coco.json", "test",
        ...                         media_root="coco")  # doctest: +SKIP
        >>> len(rs), rs.media[0]  # doctest: +SKIP
        (5000, 'val2014/COCO_val2014_000000391895.jpg')
    """
    path = os.fspath(path)
    name = "coco-karpathy" if split == "all" else f"coco-karpathy-{split}"
    return karpathy_set(
        path,
        load_json(path, line_as_record=False),
        split,
        dataset="coco",
        name=name,
        media_root=media_root,
        check_media=check_media,
    )
