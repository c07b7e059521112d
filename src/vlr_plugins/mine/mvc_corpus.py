"""``vlr mine mvc``: hard-negative *videos* for every video of a multi-view-captions corpus.

A gallery entry is a video, not a text: each video is represented by one text of the
gallery view (the first of the view's fields it has), so a mined entry is another video,
recorded by its id in the sample's ``hard_negatives`` (data/mvc_samples.py). Ids, not
texts: the trainer draws a new summary and detailed caption of every video at every step
(``c_s ~ {O, S1, S2}``, ``c_d ~ {D1*, D2*, P1, P2}``, paper sec. 4), so a negative video
gives whichever of its captions the step draws, and its frames, in both VTM directions.

- **query** (``--query``): ``summary`` (default: ``S1``, else ``S2``, else ``O``: the paper's
  summary candidates ``{O, S1, S2}``, its generated ones first, which train better than
  the web caption, its Table 4), ``detailed`` (``D1*``, ``D2*``, ``P1``, ``P2``), an explicit
  ``FIELD,...`` (first present), or ``video``: the video's own stored embedding
  (``--video-embeddings``, an EmbeddingStore keyed by the ids), video-to-text mining.
  One text per video because mining is deterministic; a video lacking every field of the
  query view is refused (file, record, field).
- **gallery** (``--pool``): the same words; default the query's view (``summary`` for
  ``video``). A video lacking every field of the gallery view is not in the gallery (it
  is never mined, and it is counted in the summary).
- **positives**: the video itself and every video that shares any caption with it, over
  all nine fields: a caption two videos share (a duplicated web caption, a generic
  summary) makes each a positive of the other, so neither is ever mined for the other.
  Equal gallery texts of different videos are therefore always positives of each other;
  equal scores otherwise rank by corpus order (the engine's tie rule).

The output is the input's records as they were (``meta``, the video paths as written, key
order), each with ``hard_negatives`` set to the mined ids, best first (after its own with
``--keep-existing``), as JSON Lines that :func:`~vlr_plugins.data.read_mvc_samples` reads.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vlr_plugins._io import atomic_open
from vlr_plugins.data.mvc_samples import (
    MVC_DETAILED_FIELDS,
    MVC_TEXT_FIELDS,
    MVCSample,
    mvc_record_kind,
    read_mvc_records,
)
from vlr_plugins.errors import DataFormatError, UsageError
from vlr_plugins.mine.corpora import MiningTask

__all__ = ["MVC_VIEWS", "mvc_task", "mvc_task_of_args", "mvc_view"]

#: the named views of ``--query`` / ``--pool``: the fields tried in order, the first present taken
MVC_VIEWS: dict[str, tuple[str, ...]] = {"summary": ("S1", "S2", "O"), "detailed": MVC_DETAILED_FIELDS}


def mvc_view(spec: str | None, *, option: str, default: str = "summary") -> tuple[str, ...] | str:
    """``--query`` / ``--pool`` -> the fields in order (or ``"video"`` for ``--query video``).
    Raises ValueError naming the unknown word."""
    spec = default if spec is None else spec.strip()
    if spec == "video" and option == "--query":
        return "video"
    if spec in MVC_VIEWS:
        return MVC_VIEWS[spec]
    fields = tuple(f.strip() for f in spec.split(","))
    bad = [f for f in fields if f not in MVC_TEXT_FIELDS]
    if bad or len(set(fields)) != len(fields):
        words = ", ".join([*MVC_VIEWS, *(["video"] if option == "--query" else [])])
        raise ValueError(f"expected {words} or caption fields FIELD,... of {', '.join(MVC_TEXT_FIELDS)}; found "
                         f"{spec!r}" + (f" ({bad[0]!r} is no field)" if bad else " (a field twice)"))
    return fields


def _first(sample: MVCSample, fields: Sequence[str]) -> str | None:
    for name in fields:
        for text in sample.texts(name):
            return text
    return None


def mvc_task(records: Sequence[tuple[int, Any, MVCSample]], *, source: str | os.PathLike[str],
             query: str | None = None, pool: str | None = None, keep_existing: bool = False) -> MiningTask:
    """The mining task of ``records`` (:func:`~vlr_plugins.data.read_mvc_records` of
    ``source``, named in errors). Raises ValueError for an unknown view word or field (the
    option's problem), DataFormatError for a video lacking the query view."""
    query_view = mvc_view(query, option="--query")
    pool_view = mvc_view(pool, option="--pool", default="summary" if query_view == "video" else (query or "summary"))
    samples = [s for _, _, s in records]
    kind = mvc_record_kind(source)
    queries = None
    if query_view != "video":
        queries = []
        for record, _, sample in records:
            text = _first(sample, query_view)
            if text is None:
                lacks = f"no {query_view[0]}" if len(query_view) == 1 else f"none of {', '.join(query_view)}"
                raise DataFormatError(source, f"video {sample.id!r} has {lacks} to mine for (--query "
                                              f"{query or 'summary'})", record=record,
                                      field="|".join(query_view), record_kind=kind)
            queries.append(text)
    gallery, gallery_video = [], []  # a text per gallery video, and that video's index
    at: dict[int, int] = {}
    for i, sample in enumerate(samples):
        text = _first(sample, pool_view)
        if text is not None:
            at[i] = len(gallery)
            gallery.append(text)
            gallery_video.append(i)
    holders: dict[str, set[int]] = {}
    for i, sample in enumerate(samples):
        for _, text in sample.captions:
            holders.setdefault(text, set()).add(i)
    positives = []
    for i, sample in enumerate(samples):
        same = {i}.union(*(holders[text] for _, text in sample.captions))
        positives.append(sorted(at[j] for j in same if j in at))
    if kind == "row":  # a Parquet value JSON cannot hold is refused before anything is mined
        for record, raw, _ in records:
            _check_json(raw, source, record)

    def write(mined: list[list[str]], path: str | os.PathLike[str]) -> dict:
        with atomic_open(Path(path)) as f:
            for (record, raw, sample), ids in zip(records, mined):
                kept = list(sample.hard_negatives) if keep_existing else []
                out = {k: v for k, v in raw.items() if k != "hard_negatives"}
                negatives = kept + [i for i in ids if i not in kept]
                if negatives:
                    out["hard_negatives"] = negatives
                f.write(json.dumps(out, ensure_ascii=False) + "\n")
        return {"videos": len(records), "gallery videos": len(gallery),
                "hard_negatives": sum(len(ids) for ids in mined)}

    return MiningTask(queries, [s.id for s in samples] if query_view == "video" else None, gallery, positives, write,
                      gallery_keys=[samples[i].id for i in gallery_video])


def mvc_task_of_args(args: argparse.Namespace) -> MiningTask:
    """``vlr mine mvc``'s task: the options checked before the corpus is read (UsageError naming
    the option), then the corpus read by the trainer's reader."""
    if args.image_embeddings is not None:
        raise UsageError("--image-embeddings", "is for paragraph corpora; an mvc corpus searches with its videos' "
                                               "embeddings by --query video --video-embeddings STORE")
    try:
        query = mvc_view(args.query, option="--query")
    except ValueError as e:
        raise UsageError("--query", str(e)) from None
    try:
        mvc_view(args.pool, option="--pool")
    except ValueError as e:
        raise UsageError("--pool", str(e)) from None
    if (query == "video") != (args.video_embeddings is not None):
        raise UsageError("--video-embeddings", "is needed with --query video, and only there" if query == "video"
                         else f"is for --query video; --query {args.query or 'summary'} embeds texts")
    records = read_mvc_records(args.input)
    task = mvc_task(records, source=args.input, query=args.query, pool=args.pool, keep_existing=args.keep_existing)
    if args.out is not None and os.path.dirname(os.path.abspath(args.out)) != os.path.dirname(os.path.abspath(args.input)) and any(
            not os.path.isabs(raw["video"]) for _, raw, _ in records):
        print(f"note: the records are written as they are: their relative video paths resolve from "
              f"{os.path.dirname(os.path.abspath(args.input))}, not from {args.out}'s folder; train with "
              "data.video_root set to it, or write --out beside the input")
    return task


def _check_json(raw: Any, source: str | os.PathLike[str], record: int) -> None:
    try:
        json.dumps(raw, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise DataFormatError(source, f"cannot be written back as JSON Lines: {e}", record=record,
                              record_kind="row") from None
