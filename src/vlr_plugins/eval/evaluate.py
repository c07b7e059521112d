"""Evaluate a text encoder on retrieval benchmarks against stored item embeddings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from vlr_plugins.data.embedding_store import EmbeddingStore
from vlr_plugins.data.retrieval_set import RetrievalSet, read_retrieval_jsonl
from vlr_plugins.errors import ConfigError
from vlr_plugins.eval.benchmarks import BenchmarkSpec, read_benchmark
from vlr_plugins.eval.encode import encode_texts
from vlr_plugins.eval.retrieval import retrieval_recall

__all__ = ["evaluate_retrieval_set", "evaluate_benchmarks", "evaluate_splits"]


def evaluate_retrieval_set(
    encoder: torch.nn.Module,
    tokenizer,
    rs: RetrievalSet,
    store: str | EmbeddingStore,
    max_tokens: int,
    *,
    ks: Sequence[int] = (1, 5, 10),
    batch_size: int = 256,
    device: str | torch.device | None = None,
    progress: bool = True,
) -> dict[str, float]:
    """Recall of ``encoder`` on ``rs``: its texts encoded at ``max_tokens``, its items from ``store``."""
    store = store if isinstance(store, EmbeddingStore) else EmbeddingStore(store)
    items = store.get(list(rs.item_ids))
    texts = encode_texts(encoder, tokenizer, rs.texts, max_tokens, batch_size=batch_size,
                         device=device, progress=progress, desc=f"encode {rs.name}")
    return retrieval_recall(items, texts, rs.text_owner, ks=ks, device=device)


def _budget(spec: BenchmarkSpec, budgets: Mapping[str, int] | None, max_positions: int | None) -> int:
    if spec.max_tokens is not None:
        budget, origin = spec.max_tokens, f"{spec.where('max_tokens')}: "
    elif spec.name in (budgets or {}):
        budget, origin = budgets[spec.name], f"benchmark {spec.name!r}: the budget given for it: "
    else:
        raise ConfigError(f"benchmark {spec.name!r} has no token budget: give max_tokens, a --protocol "
                          f"that lists it, or --budget {spec.name}=N ({spec.where()})")
    if max_positions is not None and budget > max_positions:
        raise ConfigError(f"{origin}{budget} tokens exceed the text encoder's {max_positions} positions")
    return budget


def _check_truncation(truncation: Sequence[int], max_positions: int | None) -> tuple[int, ...]:
    budgets = tuple(truncation)
    if any(isinstance(b, bool) or not isinstance(b, int) or b < 3 for b in budgets):
        raise ConfigError(f"truncation budgets must be integers >= 3 (special tokens included), found {list(budgets)}")
    if len(set(budgets)) < len(budgets):
        raise ConfigError(f"truncation budgets repeat: {list(budgets)}")
    if max_positions is not None and max(budgets) > max_positions:
        raise ConfigError(f"truncation budget {max(budgets)} exceeds the text encoder's {max_positions} positions")
    return budgets


def evaluate_benchmarks(
    encoder: torch.nn.Module,
    tokenizer,
    specs: Sequence[BenchmarkSpec],
    *,
    budgets: Mapping[str, int] | None = None,
    truncation: Sequence[int] | None = None,
    batch_size: int = 256,
    device: str | torch.device | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """``{"recall": {bench: metrics}, "budgets": {bench: n}, "truncation": {bench: {budget: metrics}}}``.

    A spec's ``max_tokens`` wins over ``budgets[name]``; one of them is required. With
    ``text_kinds`` each kind is reported as ``name/kind``.

    Every benchmark is read and checked before the first text is encoded, so that a
    problem in the last one does not end a long run: a missing or too large token budget
    (more than the encoder's ``max_positions``), truncation budgets, the annotation file
    (:func:`~vlr_plugins.eval.benchmarks.read_benchmark`), and the store: there, as wide
    as the encoder's ``embed_dim``, with a row for every item and every shard readable.
    Each problem is one :class:`~vlr_plugins.errors.UserError` naming the benchmark or
    file.
    """
    max_positions = getattr(encoder, "max_positions", None)
    embed_dim = getattr(encoder, "embed_dim", None)
    sweep = _check_truncation(truncation, max_positions) if truncation else ()
    planned = []
    for spec in specs:
        budget = _budget(spec, budgets, max_positions)
        sets = read_benchmark(spec)
        store = EmbeddingStore(spec.item_embeddings)
        if embed_dim is not None and store.dim != embed_dim:
            raise ConfigError(
                f"{spec.where('item_embeddings')}: the embedding store {store.path} holds {store.dim}-d "
                f"embeddings, but the text encoder embeds texts in {embed_dim}-d: give the store of the "
                "image tower this model was trained against")
        store.check([i for rs in sets for i in rs.item_ids])
        planned.append((spec, sets, store, budget))

    out: dict[str, Any] = {"recall": {}, "budgets": {}, "truncation": {}}
    for spec, sets, store, budget in planned:
        for rs in sets:
            key = spec.name if not spec.text_kinds else f"{spec.name}/{rs.name.rsplit('/', 1)[1]}"
            out["budgets"][key] = budget
            out["recall"][key] = evaluate_retrieval_set(encoder, tokenizer, rs, store, budget,
                                                        batch_size=batch_size, device=device, progress=progress)
            if sweep:
                from vlr_plugins.eval.truncation import truncation_sweep

                out["truncation"][key] = truncation_sweep(
                    encoder, tokenizer, store.get(list(rs.item_ids)), rs, budgets=sweep,
                    batch_size=batch_size, device=device, progress=progress)
    return out


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
    """Recall per ``{id, texts}`` JSON Lines split. ``splits``: objects with ``name``,
    ``ann_file``, ``max_tokens`` and optionally ``image_embeddings`` (falls back to the
    ``image_embeddings`` argument)."""
    results: dict[str, dict[str, float]] = {}
    for split in splits:
        store_path = getattr(split, "image_embeddings", None) or image_embeddings
        if store_path is None:
            raise ValueError(f"split {split.name!r} names no image_embeddings store")
        rs = read_retrieval_jsonl(split.ann_file, split.name)
        results[split.name] = evaluate_retrieval_set(encoder, tokenizer, rs, store_path, split.max_tokens,
                                                     ks=ks, batch_size=batch_size, device=device,
                                                     progress=progress)
    return results
