"""What is mined in each corpus format: the queries, the gallery they are searched against,
each query's positives (never returned) and how the mined texts are written back.

- **paragraph samples** (``vlr train paragraph/...``): one query per sample (its caption, its
  paragraph, or its image's stored embedding); the gallery is every distinct text of the
  pooled fields (default ``caption`` and ``positives``) of every sample; a sample's positives
  are the gallery texts it holds itself, so a text two samples share is never mined for
  either. The mined texts become the sample's ``hard_negatives`` (after the ones it has, with
  ``keep_existing``).
- **MVC corpora** (``vlr train mvc/...``): one query per video (a text of its summary view,
  or its stored embedding) against one text per video; the mined entries are videos,
  written as ids in each record's ``hard_negatives`` (:mod:`vlr_plugins.mine.mvc_corpus`).
- **NLI triplets** (CaRe stage II, SimCSE's CSV): one query per record (``sent0``); the gallery
  is every distinct ``sent1`` (the positive corpus, as sentence-transformers'
  ``mine_hard_negatives`` searches); a record's positives are the ``sent1`` of every record
  with the same ``sent0``, and ``sent0`` itself. Each mined sentence gives one output record
  ``sent0,sent1,hard_neg`` (sentence-transformers' triplet output); a record with none found
  is left out and counted.
"""

from __future__ import annotations

import csv
import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vlr_plugins._io import atomic_open
from vlr_plugins.data.nli import NLI_COLUMNS, NLITriplet
from vlr_plugins.data.sample import TEXT_FIELDS, ParagraphSample, write_paragraph_samples
from vlr_plugins.errors import DataFormatError

__all__ = ["PARAGRAPH_QUERIES", "MiningTask", "nli_task", "paragraph_task"]

#: what a paragraph sample's query can be
PARAGRAPH_QUERIES = ("caption", "paragraph", "image")


@dataclass
class MiningTask:
    """One corpus, ready to mine.

    ``query_texts`` (Q texts) or, for image queries, ``query_ids`` (Q ids of an embedding
    store); ``gallery`` (G distinct texts); ``positives`` (Q lists of gallery indices);
    ``write(mined, path)`` writes the corpus back with ``mined`` (Q lists of gallery keys,
    best first) and returns what it wrote, as a short summary. A gallery entry's key is its
    text, or ``gallery_keys[j]`` where given (MVC: the id of the video the entry stands for).
    """

    query_texts: list[str] | None
    query_ids: list[str] | None
    gallery: list[str]
    positives: list[list[int]]
    write: Callable[[list[list[str]], str | os.PathLike[str]], dict] = field(repr=False)
    gallery_keys: list[str] | None = None

    def __len__(self) -> int:
        return len(self.positives)


class _Gallery:
    """Distinct texts in first-seen order, each with its index."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.index: dict[str, int] = {}

    def add(self, text: str) -> int:
        if text not in self.index:
            self.index[text] = len(self.texts)
            self.texts.append(text)
        return self.index[text]


def paragraph_task(samples: Sequence[ParagraphSample], *, source: str | os.PathLike[str], query: str = "caption",
                   pool: Sequence[str] = ("caption", "positives"), keep_existing: bool = False) -> MiningTask:
    """The mining task of paragraph ``samples`` read from ``source`` (named in errors)."""
    if query not in PARAGRAPH_QUERIES:
        raise ValueError(f"query must be one of {', '.join(PARAGRAPH_QUERIES)}, found {query!r}")
    for name in pool:
        if name not in TEXT_FIELDS or name == "hard_negatives":
            raise ValueError(f"pool fields are texts that describe their image: caption, positives, paragraph; "
                             f"found {name!r}")
    gallery = _Gallery()
    positives = [sorted({gallery.add(text) for name in pool for text in sample.texts(name)}) for sample in samples]
    queries = None
    if query != "image":
        queries = []
        for line, sample in enumerate(samples, 1):
            text = sample.caption if query == "caption" else sample.paragraph
            if not text:
                raise DataFormatError(source, f"sample {sample.id!r} has no {query} to mine for", record=line,
                                      field=query)
            queries.append(text)

    def write(mined: list[list[str]], path: str | os.PathLike[str]) -> dict:
        out = []
        for sample, texts in zip(samples, mined):
            kept = list(sample.hard_negatives) if keep_existing else []
            out.append(dataclasses.replace(sample, hard_negatives=tuple(kept + [t for t in texts if t not in kept])))
        write_paragraph_samples(out, path)
        return {"samples": len(out), "hard_negatives": sum(len(t) for t in mined)}

    return MiningTask(queries, [s.id for s in samples] if query == "image" else None, gallery.texts, positives, write)


def nli_task(triplets: Sequence[NLITriplet]) -> MiningTask:
    """The mining task of NLI records: ``sent0`` against every distinct ``sent1``."""
    gallery = _Gallery()
    by_anchor: dict[str, set[int]] = {}
    for t in triplets:
        by_anchor.setdefault(t.sent0, set()).add(gallery.add(t.sent1))
    positives = []
    for t in triplets:
        own = set(by_anchor[t.sent0])
        if t.sent0 in gallery.index:
            own.add(gallery.index[t.sent0])
        positives.append(sorted(own))

    def write(mined: list[list[str]], path: str | os.PathLike[str]) -> dict:
        left_out = sum(1 for texts in mined if not texts)
        with atomic_open(Path(path), "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(NLI_COLUMNS)
            rows = 0
            for t, texts in zip(triplets, mined):
                for negative in texts:
                    writer.writerow((t.sent0, t.sent1, negative))
                    rows += 1
        return {"records": rows, "left_out": left_out}

    return MiningTask([t.sent0 for t in triplets], None, gallery.texts, positives, write)
