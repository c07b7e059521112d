"""The common retrieval-set type: items (images or videos) and texts that describe them."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import torch

from vlr_plugins.data.errors import DataFormatError
from vlr_plugins.registry import READERS

__all__ = ["RetrievalSet", "read_retrieval_jsonl"]


@dataclass(frozen=True)
class RetrievalSet:
    """``item_ids`` (N,), ``texts`` (M,) and ``text_owner`` (M,): the item each text describes.

    Any number of texts per item (Flickr30k/COCO: ~5, DOCCI/ShareGPT4V: 1).
    """

    name: str
    item_ids: tuple[str, ...]
    texts: tuple[str, ...]
    text_owner: torch.Tensor

    def __len__(self) -> int:
        return len(self.item_ids)

    def texts_of(self, index: int) -> list[str]:
        return [t for t, o in zip(self.texts, self.text_owner.tolist()) if o == index]


@READERS.register(name="retrieval_jsonl")
def read_retrieval_jsonl(path: str | os.PathLike, name: str | None = None) -> RetrievalSet:
    """Retrieval split as JSON Lines of ``{"id": ..., "texts": [...]}``, one item per line."""
    path = str(path)
    ids: list[str] = []
    texts: list[str] = []
    owner: list[int] = []
    seen: dict[str, int] = {}
    with open(path, encoding="utf-8-sig") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataFormatError(path, f"invalid JSON: {e.msg}", record=line_no) from None
            if not isinstance(rec, dict):
                raise DataFormatError(path, f"expected an object, found {type(rec).__name__}", record=line_no)
            if isinstance(rec.get("id"), bool) or not isinstance(rec.get("id"), (str, int)) or rec["id"] == "":
                raise DataFormatError(path, f"expected a non-empty string or an integer, found {json.dumps(rec.get('id'))}",
                                      record=line_no, field="id")
            item_texts = rec.get("texts")
            if (not isinstance(item_texts, list) or not item_texts
                    or not all(isinstance(t, str) and t.strip() for t in item_texts)):
                raise DataFormatError(path, "expected a non-empty list of non-empty strings", record=line_no, field="texts")
            item_id = str(rec["id"])
            if item_id in seen:
                raise DataFormatError(path, f"duplicate id {item_id!r} (first on line {seen[item_id]})", record=line_no, field="id")
            seen[item_id] = line_no
            owner.extend([len(ids)] * len(item_texts))
            texts.extend(item_texts)
            ids.append(item_id)
    if not ids:
        raise DataFormatError(path, "no items")
    return RetrievalSet(name or os.path.splitext(os.path.basename(path))[0], tuple(ids), tuple(texts),
                        torch.tensor(owner, dtype=torch.long))
