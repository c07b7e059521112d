"""ShareGPT4V detailed captions as a retrieval set, with the paper's fixed per-source sample."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Mapping
from types import MappingProxyType

from vlr_plugins.data.readers._common import (
    build_set,
    expect_object,
    load_json,
    record_error,
    text_value,
)
from vlr_plugins.data.retrieval_set import RetrievalSet
from vlr_plugins.errors import ConfigError, DataFormatError, _type_name
from vlr_plugins.registry import READERS

__all__ = ["PAPER_SAMPLE", "read_sharegpt4v"]

#: The paper's evaluation sample: 50K COCO and 30K LLaVA-pretrain (LCS) images.
PAPER_SAMPLE: Mapping[str, int] = MappingProxyType({"coco": 50000, "llava": 30000})


def _check_sample(sample: Mapping[str, int]) -> dict[str, str]:
    """``{source: image-path prefix}``, refusing counts and sources that cannot be drawn."""
    if not isinstance(sample, Mapping) or not sample:
        raise ConfigError(f"sample must map at least one source to a count, e.g. {{'coco': 50000}}, found {sample!r}")
    prefixes: dict[str, str] = {}
    for source, n in sample.items():
        if not isinstance(source, str) or not source.strip("/"):
            raise ConfigError(
                f"sample keys must be image-path prefixes such as 'coco', found {source!r}"
            )
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"sample[{source!r}] must be a positive integer, found {n!r}")
        prefixes[source] = source.strip("/") + "/"
    for a, pa in prefixes.items():
        for b, pb in prefixes.items():
            if a != b and pb.startswith(pa):
                # an image under both would be drawn twice and the counts would not add up
                raise ConfigError(f"sample sources {a!r} and {b!r} overlap; give disjoint folders")
    return prefixes


def _sample_name(sample: Mapping[str, int] | None) -> str:
    if not sample:
        return "sharegpt4v"
    total = sum(sample.values())
    return f"sharegpt4v-{total // 1000}k" if total % 1000 == 0 else f"sharegpt4v-{total}"


@READERS.register(name="sharegpt4v")
def read_sharegpt4v(
    path: str | os.PathLike[str],
    *,
    sample: Mapping[str, int] | None = None,
    seed: int = 0,
    media_root: str | os.PathLike[str] | None = None,
    check_media: bool = False,
) -> RetrievalSet:
    """ShareGPT4V caption files: one image, one long GPT-4V / Share-Captioner caption per record.

    Expects a JSON list in the LLaVA conversation layout, as in
    ``sharegpt4v_instruct_gpt4-vision_cap100k.json``::

        [{"id": "000000000009", "image": "coco/train2017/000000000009.jpg",
          "conversations": [{"from": "human", "value": "<image>\\n..."},
                            {"from": "gpt", "value": "<the caption>"}]}, ...]

    The text is the first ``"gpt"`` turn, as published. Item ids are the records'
    ``id`` (unique); ``media`` is ``image``, relative to ``media_root`` = ShareGPT4V's
    ``data/`` folder.

    ``sample`` draws a fixed subset per source, a source being the top folder of
    ``image``: ``sample=PAPER_SAMPLE`` (``{"coco": 50000, "llava": 30000}``) is the
    paper's 80K set. Each source's candidates are sorted by id and drawn with
    ``random.Random(seed).sample``, so the draw depends on the file's contents and the
    seed, not on its order. Items come out source by source, sorted by id. A source with
    fewer images than asked is a ``ValueError`` naming every short source at once.

    Every record is validated, sampled or not: errors name the file, ``record i``
    (= the list's ``[i]``, 0-based) and the field (``conversations[1].value``).
    ``check_media=True`` raises one ``FileNotFoundError`` listing every missing image
    of the returned set.

    Reference: Chen et al. 2023, "ShareGPT4V: Improving Large Multi-Modal Models with
    Better Captions"; the long-caption retrieval protocol of Long-CLIP (Zhang et al. 2024).

    Relations: one text per item, like :func:`~vlr_plugins.data.readers.read_docci`.

    Example::

        >>> rs = read_sharegpt4v("sharegpt4v_instruct_gpt4-vision_cap100k.json",
        ...                      sample=PAPER_SAMPLE,
        ...                      media_root="sharegpt4v/data")  # doctest: +SKIP
        >>> rs.name, len(rs)  # doctest: +SKIP
        ('sharegpt4v-80k', 80000)
    """
    path = os.fspath(path)
    prefixes = _check_sample(sample) if sample is not None else None
    data = load_json(path, line_as_record=False)
    if not isinstance(data, list):
        raise DataFormatError(
            path,
            "expected a JSON list of {'id', 'image', 'conversations'} "
            f"records, found {_type_name(data)}",
        )

    records: dict[str, tuple[str, str]] = {}  # id -> (image, caption), file order
    first_seen: dict[str, int] = {}
    for i, raw in enumerate(data):
        error = record_error(path, i)
        rec = expect_object(raw, error)
        item_id = rec.get("id")
        if (
            isinstance(item_id, bool)
            or not isinstance(item_id, (str, int))
            or (isinstance(item_id, str) and not item_id.strip())
        ):
            raise error(
                "id", f"expected a non-empty string or an integer, found {json.dumps(item_id)}"
            )
        image = text_value(rec.get("image"), "image", error)
        turns = rec.get("conversations")
        if not isinstance(turns, list):
            raise error("conversations", f"expected a list of turns, found {_type_name(turns)}")
        caption = None
        for j, turn in enumerate(turns):
            if not isinstance(turn, dict):
                raise error(f"conversations[{j}]", f"expected an object, found {_type_name(turn)}")
            for key in ("from", "value"):
                if not isinstance(turn.get(key), str):
                    raise error(
                        f"conversations[{j}].{key}",
                        f"expected a string, found {_type_name(turn.get(key))}",
                    )
            if caption is None and turn["from"] == "gpt":
                if not turn["value"].strip():
                    raise error(
                        f"conversations[{j}].value", "expected the caption, found an empty string"
                    )
                caption = turn["value"]
        if caption is None:
            raise error(
                "conversations", "expected a turn from 'gpt' holding the caption, found none"
            )
        item_id = str(item_id)
        if item_id in first_seen:
            raise error(
                "id", f"duplicate id {item_id!r}, first seen as record {first_seen[item_id]}"
            )
        first_seen[item_id] = i
        records[item_id] = (image, caption)

    if prefixes is None:
        chosen = list(records)
    else:
        chosen, short = [], []
        for source, prefix in prefixes.items():
            candidates = sorted(k for k, (image, _) in records.items() if image.startswith(prefix))
            want = sample[source]  # type: ignore[index]
            if len(candidates) < want:
                short.append(
                    f"{source!r}: asked for {want}, found {len(candidates)} "
                    f"(images under {prefix!r})"
                )
                continue
            chosen.extend(sorted(random.Random(seed).sample(candidates, want)))
        if short:
            raise ConfigError(f"{path}: too few images to sample from: {'; '.join(short)}")

    return build_set(
        _sample_name(sample),
        path,
        chosen,
        [records[k][0] for k in chosen],
        [records[k][1] for k in chosen],
        list(range(len(chosen))),
        media_root,
        check_media,
    )
