"""Evaluate a text encoder on retrieval splits against stored item embeddings."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vlr_plugins.data.embedding_store import EmbeddingStore
from vlr_plugins.data.retrieval_set import read_retrieval_jsonl
from vlr_plugins.eval.encode import encode_texts
from vlr_plugins.eval.retrieval import retrieval_recall

__all__ = ["evaluate_splits"]


def evaluate_splits(
    encoder: torch.nn.Module,
    tokenizer,
    splits: Sequence,
    *,
    image_embeddings: str | None = None,
    ks: Sequence[int] = (1, 5, 10),
    batch_size: int = 256,
    device: str | torch.device | None = None,
    progress: bool = True,
) -> dict[str, dict[str, float]]:
    """Recall per split. ``splits``: objects with ``name``, ``ann_file``, ``max_tokens`` and
    optionally ``image_embeddings`` (falls back to the ``image_embeddings`` argument)."""
    results: dict[str, dict[str, float]] = {}
    for split in splits:
        store_path = getattr(split, "image_embeddings", None) or image_embeddings
        if store_path is None:
            raise ValueError(f"split {split.name!r} names no image_embeddings store")
        rs = read_retrieval_jsonl(split.ann_file, split.name)
        items = EmbeddingStore(store_path).get(list(rs.item_ids))
        texts = encode_texts(encoder, tokenizer, rs.texts, split.max_tokens, batch_size=batch_size,
                             device=device, progress=progress, desc=f"encode {split.name}")
        results[split.name] = retrieval_recall(items, texts, rs.text_owner, ks=ks)
    return results
