"""DOCCI (Descriptions of Connected and Contrasting Images) as a retrieval set."""

from __future__ import annotations

import os
from collections.abc import Iterable

from vlr_plugins.data._text_files import json_lines
from vlr_plugins.data.readers._common import (
    build_set,
    expect_object,
    one_of,
    record_error,
    text_value,
)
from vlr_plugins.data.retrieval_set import RetrievalSet
from vlr_plugins.errors import ConfigError, DataFormatError
from vlr_plugins.registry import READERS

__all__ = ["DOCCI_SPLITS", "read_docci"]

#: The ``split`` values of ``docci_descriptions.jsonlines``, as released.
DOCCI_SPLITS = ("train", "test", "qual_dev", "qual_test")

_TEXT_FIELDS = ("example_id", "image_file", "description")


@READERS.register(name="docci")
def read_docci(
    path: str | os.PathLike[str],
    *,
    splits: str | Iterable[str] = DOCCI_SPLITS,
    media_root: str | os.PathLike[str] | None = None,
    check_media: bool = False,
) -> RetrievalSet:
    """DOCCI's ``docci_descriptions.jsonlines``: one image and one long human description per line.

    Expects JSON Lines of
    ``{"example_id": "test_01234", "split": "test", "image_file": "test_01234.jpg",
    "description": "...", ...}`` (other keys ignored; blank lines skipped). The paper
    uses all four splits (``train`` 9,647, ``test`` 5,000, ``qual_dev`` 100,
    ``qual_test`` 100), the default; ``splits`` keeps fewer (a single name is accepted).

    Item ids are ``example_id``; ``media`` is ``image_file``, relative to ``media_root``
    = the ``images/`` folder of ``docci_images.tar.gz``. One text per item, in file order.

    Every line is validated, kept or not: errors name the file, the 1-based ``line`` and
    the field; repeated ``example_id`` names both lines. ``check_media=True`` raises one
    ``FileNotFoundError`` listing every missing image. The set is named ``docci`` (all
    splits) or ``docci-test`` etc.

    Reference: Onoe et al. 2024, "DOCCI: Descriptions of Connected and Contrasting Images".

    Relations: one text per item, like
    :func:`~vlr_plugins.data.readers.read_sharegpt4v`.

    Example::

        >>> rs = read_docci("docci_descriptions.jsonlines",
        ...                 media_root="docci/images")  # doctest: +SKIP
        >>> rs.name, len(rs)  # doctest: +SKIP
        ('docci', 14847)
    """
    path = os.fspath(path)
    if not isinstance(splits, (str, Iterable)):
        raise ConfigError(f"splits must be a split name or a list of them, found {splits!r}")
    wanted = (splits,) if isinstance(splits, str) else tuple(splits)
    unknown = [s for s in wanted if s not in DOCCI_SPLITS]
    if not wanted or unknown:
        raise ConfigError(f"splits must be some of {', '.join(DOCCI_SPLITS)}, found {list(wanted)}")

    ids: list[str] = []
    media: list[str] = []
    texts: list[str] = []
    first_seen: dict[str, int] = {}
    for line_no, raw in json_lines(path):
        error = record_error(path, line_no, "line")
        rec = expect_object(raw, error)
        for field in _TEXT_FIELDS:
            text_value(rec.get(field), field, error)
        one_of(rec.get("split"), DOCCI_SPLITS, "split", error)
        item_id = rec["example_id"]
        if item_id in first_seen:
            raise error(
                "example_id",
                f"duplicate example_id {item_id!r}, first on line {first_seen[item_id]}",
            )
        first_seen[item_id] = line_no
        if rec["split"] in wanted:
            ids.append(item_id)
            media.append(rec["image_file"])
            texts.append(rec["description"])

    if not ids and first_seen:
        raise DataFormatError(path, f"no lines with split in {list(wanted)}")
    name = "docci" if set(wanted) == set(DOCCI_SPLITS) else "docci-" + "+".join(wanted)
    return build_set(name, path, ids, media, texts, list(range(len(ids))), media_root, check_media)
