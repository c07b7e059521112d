"""Evaluate a text encoder or text model on retrieval benchmarks against stored item embeddings."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from vlr_plugins.data.embedding_store import EmbeddingStore
from vlr_plugins.data.retrieval_set import RetrievalSet, read_retrieval_jsonl
from vlr_plugins.errors import ConfigError
from vlr_plugins.eval.benchmarks import BenchmarkSpec, read_benchmark
from vlr_plugins.eval.encode import encode_texts
from vlr_plugins.eval.metric_names import MetricChoice, parse_metrics
from vlr_plugins.eval.models import encode_with_model, match_reranker, takes_keyword, text_model_dim
from vlr_plugins.eval.protocols import check_store_sampling, protocol_entries
from vlr_plugins.eval.query_bank import QueryBanks, check_bank_dim, check_renorm
from vlr_plugins.eval.renorm import QueryBankNorm, Renorm
from vlr_plugins.eval.retrieval import retrieval_recall

__all__ = ["evaluate_retrieval_set", "evaluate_benchmarks", "evaluate_splits"]


def evaluate_retrieval_set(
    encoder: Any,
    tokenizer,
    rs: RetrievalSet,
    store: str | EmbeddingStore,
    max_tokens: int | None,
    *,
    ks: Sequence[int] = (1, 5, 10),
    batch_size: int = 256,
    device: str | torch.device | None = None,
    progress: bool = True,
    view: str | None = None,
    rerank_k: int | None = None,
    rerank_batch: int = 64,
    rank_metrics: Sequence[str] = (),
    renorm: Renorm | None = None,
) -> dict[str, float]:
    """Recall of ``encoder`` on ``rs``: its texts encoded at ``max_tokens``, its items from ``store``;
    with ``rank_metrics`` (``mdr``, ``mrr@10``, ...) those too (:func:`~vlr_plugins.eval.retrieval_recall`).

    ``encoder``: a text encoder ``encoder(input_ids, attention_mask)`` with its
    ``tokenizer``, or (``tokenizer=None``) a text model (:mod:`vlr_plugins.eval.models`),
    whose ``encode_text`` gets ``max_tokens`` and ``view`` if it takes them. With
    ``rerank_k`` each query's top ``rerank_k`` candidates are re-scored by the model's
    ``match_scores`` (:func:`~vlr_plugins.eval.models.match_reranker`). ``renorm``: rank by
    re-normalised scores (:class:`~vlr_plugins.eval.DualSoftmax`, :class:`~vlr_plugins.eval.QueryBankNorm`);
    the result then holds the engine's ``"renorm"`` record.
    """
    store = store if isinstance(store, EmbeddingStore) else EmbeddingStore(store)
    items = store.get(list(rs.item_ids))
    texts = _encode(encoder, tokenizer, rs.texts, max_tokens, view=view, batch_size=batch_size, device=device,
                    progress=progress, desc=f"encode {rs.name}")
    rerank = match_reranker(encoder, rs.item_ids, rs.texts, items) if rerank_k else None
    return retrieval_recall(items, texts, rs.text_owner, ks=ks, device=device, rerank=rerank,
                            rerank_k=rerank_k or 128, rerank_batch=rerank_batch, rank_metrics=tuple(rank_metrics),
                            renorm=renorm)


def _encode(encoder: Any, tokenizer, texts: Sequence[str], max_tokens: int | None, *, view: str | None,
            batch_size: int, device, progress: bool, desc: str) -> torch.Tensor:
    """``texts`` embedded as :func:`evaluate_retrieval_set` embeds a benchmark's texts."""
    if tokenizer is not None:
        return encode_texts(encoder, tokenizer, texts, max_tokens, batch_size=batch_size, device=device,
                            progress=progress, desc=desc, view=view)
    return encode_with_model(encoder, texts, max_tokens=max_tokens, view=view, batch_size=batch_size,
                             progress=progress, desc=desc)


def _budget(spec: BenchmarkSpec, budgets: Mapping[str, int] | None, max_positions: int | None,
            required: bool = True) -> int | None:
    if spec.max_tokens is not None:
        budget, origin = spec.max_tokens, f"{spec.where('max_tokens')}: "
    elif spec.name in (budgets or {}):
        budget, origin = budgets[spec.name], f"benchmark {spec.name!r}: the budget given for it: "
    elif not required:
        return None
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


def _check_text_model(model: Any, specs: Sequence[BenchmarkSpec], budgets: Mapping[str, int] | None,
                      truncation: Sequence[int] | None, rerank_k: int | None) -> None:
    """What a text model (no tokenizer) must offer for the options given."""
    name = getattr(model, "name", None) or type(model).__name__
    if not callable(getattr(model, "encode_text", None)):
        raise ConfigError(f"{name} has no encode_text(texts) -> (N, D); see vlr_plugins.eval.models")
    if truncation:
        raise ConfigError(f"a truncation sweep encodes at budgets through a tokenizer; {name} tokenizes itself")
    if not takes_keyword(model.encode_text, "max_tokens"):
        for spec in specs:
            if spec.max_tokens is not None or spec.name in (budgets or {}):
                where = spec.where("max_tokens") if spec.max_tokens is not None else f"benchmark {spec.name!r}"
                raise ConfigError(f"{where}: a token budget is given, but {name}.encode_text takes no max_tokens")
    if rerank_k is not None and not callable(getattr(model, "match_scores", None)):
        raise ConfigError(f"re-ranking needs a matching head, and {name} has no match_scores(item_ids, item_emb, "
                          "texts); see vlr_plugins.eval.models")


def evaluate_benchmarks(
    encoder: Any,
    tokenizer,
    specs: Sequence[BenchmarkSpec],
    *,
    budgets: Mapping[str, int] | None = None,
    truncation: Sequence[int] | None = None,
    batch_size: int = 256,
    device: str | torch.device | None = None,
    progress: bool = True,
    protocol: str | None = None,
    rerank_k: int | None = None,
    rerank_batch: int = 64,
    on_warning: Callable[[str], None] | None = None,
    metrics: MetricChoice | Sequence[str] | None = None,
    renorm: Renorm | QueryBanks | None = None,
) -> dict[str, Any]:
    """``{"recall": {bench: metrics}, "budgets": {bench: n}, "truncation": {bench: {budget: metrics}}}``,
    and, when a protocol or re-ranking gives them, ``"text_views"``, ``"sampling"`` and ``"rerank_k"``.

    ``encoder``: a text encoder with its ``tokenizer`` (our checkpoints), or, with
    ``tokenizer=None``, a text model (:mod:`vlr_plugins.eval.models`: open_clip, or any
    object with ``encode_text``). For a text encoder a spec's ``max_tokens`` wins over
    ``budgets[name]``, and one of them is required; a text model encodes at its own
    length unless one of them is given (then its ``encode_text`` must take
    ``max_tokens``). With ``text_kinds`` each kind is reported as ``name/kind``.

    ``protocol`` (a name of :func:`~vlr_plugins.eval.list_protocols`): for each benchmark
    it lists, the store's recorded frames and sampler are checked
    (:func:`~vlr_plugins.eval.protocols.check_store_sampling`; a store that records none
    is reported to ``on_warning``, default :func:`warnings.warn`), and its ``text_view``
    is passed to a model whose ``encode_text`` takes ``view``. Its budgets are not read
    here: pass them in ``budgets`` (:func:`~vlr_plugins.eval.token_budgets`).
    ``rerank_k``: re-rank each query's top k with the model's ``match_scores`` (UMT's
    k_test is 128), ``rerank_batch`` queries at a time.

    ``metrics``: the metrics to compute, names of :mod:`vlr_plugins.eval.metric_names`
    (``["r@1", "r@5", "mdr", "mrr@10"]``) or their :class:`~vlr_plugins.eval.metric_names.MetricChoice`;
    default R@1/5/10. The result then holds ``"metrics"`` (the names) and each benchmark's
    keys for them (``i2t_r1``, ``t2i_mdr``, ...; the truncation sweep's too). Given, every K
    is checked against both galleries of every benchmark as soon as it is read.

    ``renorm``: rank by re-normalised scores, :class:`~vlr_plugins.eval.DualSoftmax` or
    :class:`~vlr_plugins.eval.QueryBankNorm`, or :class:`~vlr_plugins.eval.query_bank.QueryBanks`,
    whose text bank is encoded like each benchmark's texts (its budget and text view; once per
    budget and view). The result then holds ``"renorm"`` (the method's record; for ``QueryBanks``
    with where each bank came from), and each benchmark's result the engine's ``"renorm"``.
    Refused with ``rerank_k``; with ``truncation`` every budget is re-normalised (a text bank
    encoded at each budget). An item bank must be as wide as every store.
    A text bank holding a benchmark's texts, or an item bank its items (by id or an identical
    embedding), is reported to ``on_warning`` (test queries in the bank are leakage).

    Every benchmark is read and checked before the first text is encoded, so that a
    problem in the last one does not end a long run: a missing or too large token budget
    (more than the encoder's ``max_positions``), truncation budgets, what the model
    offers for the options, the annotation file
    (:func:`~vlr_plugins.eval.benchmarks.read_benchmark`), and the store: there, as wide
    as the model's text embeddings, with a row for every item and every shard readable,
    its frames those of the protocol. Each problem is one
    :class:`~vlr_plugins.errors.UserError` naming the benchmark or file.
    """
    check_renorm(renorm, rerank_k=rerank_k)
    if tokenizer is None:
        _check_text_model(encoder, specs, budgets, truncation, rerank_k)
        embed_dim = None  # the model's embed_dim, else learnt from the first benchmark's first text
    else:
        if rerank_k is not None:
            raise ConfigError("re-ranking needs a matching head (match_scores); a text encoder with a tokenizer "
                              "has none")
        embed_dim = getattr(encoder, "embed_dim", None)
    max_positions = getattr(encoder, "max_positions", None)
    sweep = _check_truncation(truncation, max_positions) if truncation else ()
    entries = protocol_entries(protocol)
    warn = on_warning or (lambda message: warnings.warn(message, stacklevel=3))
    choice = metrics if isinstance(metrics, MetricChoice) else parse_metrics(metrics)
    planned = []
    for spec in specs:
        budget = _budget(spec, budgets, max_positions, required=tokenizer is not None)
        sets = read_benchmark(spec)
        if metrics is not None:
            for key, rs in zip(spec.result_keys(), sets):
                choice.check_gallery(key, len(rs.item_ids), len(rs.texts), spec.where())
        store = EmbeddingStore(spec.item_embeddings)
        if tokenizer is None and embed_dim is None:
            embed_dim = text_model_dim(encoder, sets[0].texts[0])
        if embed_dim is not None and store.dim != embed_dim:
            raise ConfigError(
                f"{spec.where('item_embeddings')}: the embedding store {store.path} holds {store.dim}-d "
                f"embeddings, but the text encoder embeds texts in {embed_dim}-d: give the store of the "
                "image tower this model was trained against")
        check_bank_dim(renorm, store, spec.where('item_embeddings'))
        store.check([i for rs in sets for i in rs.item_ids])
        entry = entries.get(spec.name)
        unchecked = check_store_sampling(store.meta, entry, store=store.path, where=spec.where("item_embeddings"),
                                         protocol=protocol)
        if unchecked:
            warn(unchecked)
        if isinstance(renorm, QueryBanks) and renorm.texts is not None:
            bank = set(renorm.texts.texts)
            for key, rs in zip(spec.result_keys(), sets):
                shared = len(bank.intersection(rs.texts))
                if shared:
                    warn(f"{shared} of the query bank's distinct texts ({renorm.texts.path}) are texts of benchmark "
                         f"{key!r}: QB-Norm's bank should hold training queries, not the test's")
        if isinstance(renorm, QueryBanks) and renorm.items is not None:
            for key, rs in zip(spec.result_keys(), sets):
                shared = renorm.items.shared_with(rs.item_ids, store)
                if shared:
                    warn(f"{shared} of the item bank's {len(renorm.items.embeddings)} items ({renorm.items.path}) are "
                         f"items of benchmark {key!r} (the same id or an identical embedding): QB-Norm's bank should "
                         "hold training items, not the test's")
        planned.append((spec, sets, store, budget, entry))

    out: dict[str, Any] = {"recall": {}, "budgets": {}, "truncation": {}}
    if metrics is not None:
        out["metrics"] = list(choice.names)
    if renorm is not None:
        out["renorm"] = renorm.record()
    banks: dict[tuple, QueryBankNorm] = {}  # QueryBanks encoded, by (budget, view)

    def bank_at(budget: int | None, view: str | None) -> QueryBankNorm:
        if (budget, view) not in banks:
            banks[budget, view] = renorm.resolve(lambda texts: _encode(
                encoder, tokenizer, texts, budget, view=view, batch_size=batch_size, device=device,
                progress=progress, desc=f"encode the query bank at {budget or 'its own'} tokens"))
        return banks[budget, view]

    for spec, sets, store, budget, entry in planned:
        view = entry.text_view if entry is not None else None
        for key, rs in zip(spec.result_keys(), sets):
            out["budgets"][key] = budget
            if view is not None and (hasattr(encoder, "view_index") if tokenizer is not None
                                     else takes_keyword(encoder.encode_text, "view")):
                out.setdefault("text_views", {})[key] = view
            if entry is not None and entry.frames is not None:
                out.setdefault("sampling", {})[key] = {"frames": entry.frames, "sampler": entry.sampler}
            if (getattr(store, "meta", None) or {}).get("media") == "video":  # reported as T2V / V2T
                out.setdefault("media", {})[key] = "video"
            ranked_by = bank_at(budget, view) if isinstance(renorm, QueryBanks) else renorm
            out["recall"][key] = evaluate_retrieval_set(
                encoder, tokenizer, rs, store, budget, ks=choice.ks, batch_size=batch_size, device=device,
                progress=progress, view=view, rerank_k=rerank_k, rerank_batch=rerank_batch,
                rank_metrics=choice.rank_metrics, renorm=ranked_by)
            if sweep:
                from vlr_plugins.eval.truncation import truncation_sweep

                # the sweep encodes without a view: a text bank too, at each of its budgets
                curve = truncation_sweep(encoder, tokenizer, store.get(list(rs.item_ids)), rs, budgets=sweep,
                                         ks=choice.ks, rank_metrics=choice.rank_metrics,
                                         renorm=(lambda b: bank_at(b, None)) if isinstance(renorm, QueryBanks)
                                         else renorm,
                                         batch_size=batch_size, device=device, progress=progress)
                out["truncation"][key] = curve
    if rerank_k is not None:
        out["rerank_k"] = rerank_k
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
