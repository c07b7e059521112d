"""Flickr30k as a retrieval set, from any of the three annotation files in circulation."""

from __future__ import annotations

import os

from vlr_plugins.data.readers._common import (
    build_set,
    expect_object,
    parse_json,
    read_text,
    record_error,
    stem,
    text_value,
)
from vlr_plugins.data.readers._karpathy import KARPATHY_SPLITS, karpathy_set
from vlr_plugins.data.retrieval_set import RetrievalSet
from vlr_plugins.errors import ConfigError, DataFormatError, _type_name
from vlr_plugins.registry import READERS

__all__ = ["KARPATHY_SPLITS", "read_flickr30k"]


def _token_set(path, text, media_root, check_media) -> RetrievalSet:
    """The official ``results_20130124.token``: ``<file>.jpg#<n><TAB><caption>`` per line."""
    ids: list[str] = []
    media: list[str] = []
    texts: list[str] = []
    owner: list[int] = []
    index: dict[str, int] = {}
    seen_keys: dict[str, int] = {}
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        key, tab, caption = line.partition("\t")
        if not tab:
            raise DataFormatError(
                path,
                "expected '<image>.jpg#<n><TAB><caption>' (the layout of "
                f"results_20130124.token), found no tab in {line[:60]!r}",
                record=line_no,
            )
        image, hash_, number = key.strip().rpartition("#")
        if not hash_ or not image or not number.isdigit():
            raise DataFormatError(
                path, f"expected '<image>.jpg#<n>', found {key!r}", record=line_no, field="image"
            )
        if not caption.strip():
            raise DataFormatError(
                path,
                "expected a caption after the tab, found none",
                record=line_no,
                field="caption",
            )
        if key.strip() in seen_keys:
            raise DataFormatError(
                path,
                f"duplicate caption {key.strip()!r}, first on line {seen_keys[key.strip()]}",
                record=line_no,
                field="image",
            )
        seen_keys[key.strip()] = line_no
        if image not in index:
            index[image] = len(ids)
            ids.append(stem(image))
            media.append(image)
        owner.append(index[image])
        texts.append(caption)
    return build_set("flickr30k", path, ids, media, texts, owner, media_root, check_media)


def _lavis_set(path, data, split, media_root, check_media) -> RetrievalSet:
    """LAVIS' ``flickr30k_{val,test}.json``: ``[{"image": ..., "caption": [...]}, ...]``."""
    ids: list[str] = []
    media: list[str] = []
    texts: list[str] = []
    owner: list[int] = []
    first_seen: dict[str, int] = {}
    for i, raw in enumerate(data):
        error = record_error(path, i)
        rec = expect_object(raw, error)
        image = text_value(rec.get("image"), "image", error)
        captions = rec.get("caption")
        if isinstance(captions, str):
            raise error(
                "caption",
                "expected a list of captions (LAVIS' val/test files), found one "
                "string; LAVIS' train file has one caption per record, use "
                "dataset_flickr30k.json with split='train' instead",
            )
        if not isinstance(captions, list) or not captions:
            raise error(
                "caption", f"expected a non-empty list of strings, found {_type_name(captions)}"
            )
        for j, c in enumerate(captions):
            text_value(c, f"caption[{j}]", error)
        item_id = stem(image)
        if item_id in first_seen:
            raise error(
                "image", f"duplicate image {item_id!r}, first seen as record {first_seen[item_id]}"
            )
        first_seen[item_id] = i
        owner.extend([len(ids)] * len(captions))
        texts.extend(captions)
        # LAVIS paths carry its folder ("flickr30k-images/x.jpg"); dropping it lets one
        # media_root (the image folder) serve all three annotation formats
        media.append(os.path.basename(image))
        ids.append(item_id)
    return build_set(f"flickr30k-{split}", path, ids, media, texts, owner, media_root, check_media)


@READERS.register(name="flickr30k")
def read_flickr30k(
    path: str | os.PathLike[str],
    *,
    split: str = "test",
    media_root: str | os.PathLike[str] | None = None,
    check_media: bool = False,
) -> RetrievalSet:
    """Flickr30k image-text retrieval: ~31K images, 5 captions each.

    Expects one of three annotation files, told apart by content:

    ========================================  =====================================  ==========
    file                                      layout                                 ``split``
    ========================================  =====================================  ==========
    Karpathy's ``dataset_flickr30k.json``     ``{"images": [{"filename", "split",    selects
                                              "sentences": [{"raw"}]}], ...}``
    official ``results_20130124.token``       ``1000092795.jpg#0<TAB>caption``       ``"all"``
    LAVIS' ``flickr30k_{val,test}.json``      ``[{"image", "caption": [...]}]``      the file's
    ========================================  =====================================  ==========

    ``split`` is ``"train"``, ``"val"``, ``"test"`` (Karpathy's 1K), ``"restval"`` or
    ``"all"``. The paper evaluates the full set, ``split="all"``: 31,014 images in
    Karpathy's file, 31,783 in the official token file. The token file has no split
    labels, so any split but ``"all"`` is a ``ValueError`` rather than a silent 31K
    "test" set; a LAVIS file is one split already (``"all"`` is refused, other names only
    label the set).

    Item ids are file names without extension (``"1000092795"``); ``media`` is the file
    name, relative to ``media_root`` = the image folder (``flickr30k-images/``) for all
    three formats. Captions are kept as published, in file order.

    Every record is validated before anything is returned: errors name the file, the
    record (``image i`` = ``images[i]``, ``record i`` = the LAVIS list's ``[i]``, or a
    1-based ``line``) and the field. ``check_media=True`` raises one
    ``FileNotFoundError`` listing every missing image.

    Reference: Young et al. 2014, "From image descriptions to visual denotations";
    Karpathy & Fei-Fei 2015 for the splits.

    Relations: :func:`~vlr_plugins.data.readers.read_coco_karpathy` reads the COCO file
    of the same Karpathy release; all readers return a
    :class:`~vlr_plugins.data.RetrievalSet`.

    Example::

        >>> rs = read_flickr30k("dataset_flickr30k.json", split="all",
        ...                     media_root="flickr30k-images")  # doctest: +SKIP
        >>> len(rs), len(rs.texts)  # doctest: +SKIP
        (31014, 155070)
    """
    path = os.fspath(path)
    text = read_text(path)
    start = text.lstrip()[:1]
    if start == "{":
        data = parse_json(path, text, line_as_record=False)
        name = "flickr30k" if split == "all" else f"flickr30k-{split}"
        return karpathy_set(
            path,
            data,
            split,
            dataset="flickr30k",
            name=name,
            media_root=media_root,
            check_media=check_media,
        )
    if start == "[":
        if split == "all":
            raise ConfigError(
                f"{path} is a LAVIS annotation file, which holds one split; "
                "for the full set read dataset_flickr30k.json or "
                "results_20130124.token with split='all'"
            )
        data = parse_json(path, text, line_as_record=False)
        return _lavis_set(path, data, split, media_root, check_media)
    first = next((line for line in text.splitlines() if line.strip()), "")
    if "\t" not in first or "#" not in first.partition("\t")[0]:
        line_no = text.splitlines().index(first) + 1 if first else None
        raise DataFormatError(
            path,
            "expected one of Karpathy's dataset_flickr30k.json, LAVIS' "
            "flickr30k_*.json or the official results_20130124.token "
            f"('<image>.jpg#<n><TAB><caption>'), found {first[:60]!r}",
            record=line_no,
        )
    if split != "all":
        raise ConfigError(
            f"{path} is the official token file, which holds the full Flickr30k set "
            f"without split labels; pass split='all' (found split={split!r}), or read "
            "Karpathy's dataset_flickr30k.json for its train/val/test splits"
        )
    return _token_set(path, text, media_root, check_media)
