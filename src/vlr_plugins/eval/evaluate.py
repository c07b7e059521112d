"""Evaluate a text encoder on retrieval benchmarks against stored item embeddings."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import yaml

from vlr_plugins.data.embedding_store import EmbeddingStore
from vlr_plugins.data.errors import DataFormatError
from vlr_plugins.data.retrieval_set import RetrievalSet, read_retrieval_jsonl
from vlr_plugins.eval.encode import encode_texts
from vlr_plugins.eval.retrieval import retrieval_recall

__all__ = ["BenchmarkSpec", "load_benchmark_specs", "evaluate_retrieval_set", "evaluate_benchmarks",
           "evaluate_splits"]


@dataclass(frozen=True)
class BenchmarkSpec:
    """One benchmark to evaluate: a registered reader over its annotation file, the
    store of its item embeddings (``vlr precompute``), and optionally its token budget
    and the text kinds to score separately (CaReBench: general, spatial, temporal)."""

    name: str
    reader: str
    path: str
    item_embeddings: str
    args: dict[str, Any] = field(default_factory=dict)
    max_tokens: int | None = None
    text_kinds: tuple[str, ...] | None = None


def load_benchmark_specs(path: str | os.PathLike) -> list[BenchmarkSpec]:
    """Read ``benchmarks: [{name, reader, path, item_embeddings, args?, max_tokens?, text_kinds?}]``.

    Relative paths are taken relative to the YAML file.
    """
    from vlr_plugins.registry import READERS

    path = str(path)
    with open(path, encoding="utf-8") as f:
        raw = yaml.safe_load(f) or {}
    entries = raw.get("benchmarks") if isinstance(raw, dict) else None
    if not isinstance(entries, list) or not entries:
        raise DataFormatError(path, "expected a top-level 'benchmarks:' list", field="benchmarks")
    allowed = {f.name for f in dataclasses.fields(BenchmarkSpec)}
    base = os.path.dirname(os.path.abspath(path))
    specs = []
    for i, entry in enumerate(entries, start=1):
        where = dict(record=i, record_kind="benchmark")
        if not isinstance(entry, dict):
            raise DataFormatError(path, "expected a mapping", **where)
        for key in entry:
            if key not in allowed:
                raise DataFormatError(path, f"unknown key (allowed: {', '.join(sorted(allowed))})", field=key, **where)
        for key in ("name", "reader", "path", "item_embeddings"):
            if not isinstance(entry.get(key), str):
                raise DataFormatError(path, "missing (a string is required)", field=key, **where)
        if entry["reader"] not in READERS:
            raise DataFormatError(path, f"unknown reader {entry['reader']!r}; registered: "
                                  f"{', '.join(READERS.names())}", field="reader", **where)
        resolved = {k: (v if os.path.isabs(v) else os.path.join(base, v))
                    for k, v in entry.items() if k in ("path", "item_embeddings")}
        kinds = entry.get("text_kinds")
        specs.append(BenchmarkSpec(**{**entry, **resolved,
                                      "text_kinds": tuple(kinds) if kinds else None}))
    return specs


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
    """
    from vlr_plugins.registry import READERS

    out: dict[str, Any] = {"recall": {}, "budgets": {}, "truncation": {}}
    for spec in specs:
        budget = spec.max_tokens or (budgets or {}).get(spec.name)
        if budget is None:
            raise KeyError(f"benchmark {spec.name!r} has no token budget: give max_tokens, a --protocol "
                           f"that lists it, or --budget {spec.name}=N")
        full = READERS.get(spec.reader)(spec.path, **spec.args)
        sets = [full.with_texts(k) for k in spec.text_kinds] if spec.text_kinds else [full]
        store = EmbeddingStore(spec.item_embeddings)
        for rs in sets:
            key = spec.name if not spec.text_kinds else f"{spec.name}/{rs.name.rsplit('/', 1)[1]}"
            out["budgets"][key] = budget
            out["recall"][key] = evaluate_retrieval_set(encoder, tokenizer, rs, store, budget,
                                                        batch_size=batch_size, device=device, progress=progress)
            if truncation:
                from vlr_plugins.eval.truncation import truncation_sweep

                out["truncation"][key] = truncation_sweep(
                    encoder, tokenizer, store.get(list(rs.item_ids)), rs, budgets=tuple(truncation),
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
