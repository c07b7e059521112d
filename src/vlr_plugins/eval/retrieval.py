"""Exact recall@k for retrieval with any number of texts per item, in bounded memory.

The full (items x texts) score matrix never exists: it is visited tile by tile, each tile
once, and each tile updates both directions, so memory beyond the embeddings is one tile
whatever N and M are. When the texts are listed grouped by item (every benchmark file),
each pair is scored exactly once (``grouped_ranks``); otherwise a first, small pass scores
the positive pairs before the main one (``exact_ranks``).
Half-precision tiles are settled in float32 where it matters (``reduced_precision``);
re-ranking scores whole rows (``row_ranks``). ``_tiles`` holds what they share.

Ties are broken by gallery index: a candidate with the same score as the positive
ranks ahead of it only if its index is lower. The result is therefore the same on
every run and every device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from vlr_plugins.eval import _count_kernels, _tile_calibration
from vlr_plugins.eval._tiles import DEFAULT_CHUNK_BYTES, ScoreMatrix, l2_share
from vlr_plugins.eval.exact_ranks import exact_ranks
from vlr_plugins.eval.grouped_ranks import diagonal_blocks, grouped_ranks
from vlr_plugins.eval.best_rank_metrics import rank_metrics as _rank_metrics
from vlr_plugins.eval.graded_metrics import graded_rank_metrics
from vlr_plugins.eval.metric_names import GRADED, parse_rank_metric
from vlr_plugins.eval.pair_ranks import least_per_item, row_pair_ranks
from vlr_plugins.eval.reduced_precision import bracketed_ranks
from vlr_plugins.eval.renorm import Renorm, renorm_keys
from vlr_plugins.eval.row_ranks import row_ranks

__all__ = ["retrieval_recall"]

_PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def retrieval_recall(
    item_emb: torch.Tensor,
    text_emb: torch.Tensor,
    text_owner: torch.Tensor,
    *,
    ks: Sequence[int] = (1, 5, 10),
    chunk_size: int | None = None,
    device: str | torch.device | None = None,
    return_ranks: bool = False,
    precision: str = "fp32",
    rerank: Callable[[torch.Tensor, torch.Tensor, str], torch.Tensor] | None = None,
    rerank_k: int = 128,
    rerank_batch: int = 64,
    max_chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    rank_metrics: Sequence[str] = (),
    renorm: Renorm | None = None,
) -> dict:
    """Recall@k (percent) in both directions, streamed in bounded memory.

    item_emb: (N, D) images or videos; text_emb: (M, D); text_owner: (M,) the item each
    text belongs to (any number of texts per item, at least one). Embeddings need not be
    normalised. Image-to-text is a hit when any of the item's texts is in the top k (LAVIS /
    CLIP_benchmark semantics); text-to-image when the owner is in the top k.

    Returns ``i2t_r{k}``, ``t2i_r{k}``, ``i2t_mean``, ``t2i_mean`` and ``r_mean``
    (``ks=()`` with ``rank_metrics``: none of these, only the rank metrics; ``ks=()``
    without them is refused); with ``return_ranks`` also ``i2t_ranks`` (N,) and
    ``t2i_ranks`` (M,): the 0-based rank of each item's best text and of each text's owner.

    Memory: the score matrix is visited in tiles of ``chunk_size`` items (default: chosen
    from ``max_chunk_bytes``) by a matching number of texts, a tile and one work buffer at
    a time (at most ``max_chunk_bytes``), plus the tile's rows of embeddings (at most
    8 D bytes per item and per text of a tile) and about 100 bytes of bookkeeping per item
    and per text; embeddings are moved to ``device`` (default: the items' device) but never
    copied whole in float32. On a CPU, without ``rerank`` and in fp32, up to
    ``torch.get_num_threads()`` workers visit tiles at once, each single-threaded with its
    own tile: the budget is shared among them (the bound is unchanged), and each keeps its
    own count per item (4 or 8 bytes).

    ``precision="fp16"`` or ``"bf16"`` multiplies the tiles in half precision (summed in
    float32). Guarantee: every query whose hit or miss at some k <= max(ks) could depend on
    the rounding is settled in float32: its candidates within a proven error bound of the
    best positive (``reduced_precision.lowp_error``: 3.5u + 8 D 2^-24, u = 2^-11 for fp16,
    2^-8 for bf16) are rescored in float32 and compared with the tie rule. So recall@k and every rank
    below max(ks) equal the ``"fp32"`` result; larger ranks are lower bounds (>= max(ks)).
    The one exception is two scores of a query closer than float32 rounding (~D 2^-24),
    which no float32 method orders the same way on every kernel.

    ``rerank(query_indices (q,), candidate_indices (q, k), direction) -> scores (q, k)``
    re-scores each query's top ``rerank_k`` candidates (e.g. BLIP's ITM head with k_test),
    called with at most ``rerank_batch`` queries at a time; ``direction`` is ``"i2t"``
    (queries are items, candidates texts) or ``"t2i"``, indices are on the engine's device
    and candidates come best first. The candidates are then re-ordered by the new scores
    (equal scores keep their first-stage order) and the ranks read from that order; a
    query whose positives are all outside its top ``rerank_k`` keeps its first-stage rank
    (>= rerank_k), i.e. it is placed after the candidates. With ``rerank`` each direction is
    scored on its own, ``chunk_size`` queries (default: from ``max_chunk_bytes``) against
    the whole gallery at a time, in float32 whatever ``precision``.

    ``rank_metrics``: also ``mdr``, ``mnr`` and ``mrr@k`` of the best positive in both
    directions (``i2t_mdr``, ``t2i_mrr@10``, ...; :mod:`vlr_plugins.eval.best_rank_metrics`),
    read from the same exact ranks, and ``map@k`` / ``ndcg@k`` graded over every positive
    (:mod:`vlr_plugins.eval.graded_metrics`): image-to-text then ranks every text in its
    item's row (:mod:`vlr_plugins.eval.pair_ranks`): in the same tiled pass, whatever the order
    of the texts, one more comparison per score and per text of an item (the most an item of
    the row tile has; an item with far more texts than the mean is ranked row-wise); with
    ``renorm`` and texts not grouped, or ``rerank``, one more row-wise pass over the matrix;
    ``return_ranks`` then adds ``i2t_pair_ranks`` (M,). In
    ``"fp16"`` / ``"bf16"`` only ranks below ``max(ks)`` are exact, so MdR, MnR and MRR@k with
    k > max(ks), and mAP@k / nDCG@k (every positive's rank), are refused there.

    ``renorm``: rank by re-normalised scores (:mod:`vlr_plugins.eval.renorm`):
    ``DualSoftmax(temperature=100)`` (dual softmax, both directions) or
    ``QueryBankNorm(text_bank=..., item_bank=..., beta=20, k=1)`` (QB-Norm with a bank of
    queries per direction); the result then records it as ``renorm`` (e.g. ``{"method": "dsl",
    "temperature": 100.0}``). Exact, in two tiled passes over the matrix (the statistics, then
    the ranks on the transformed scores; plus one over each bank x gallery), memory bounded as
    without it (a third tile buffer, counted in ``max_chunk_bytes``). With texts not grouped by
    item each direction is ranked row-wise (a chunk of queries x the whole gallery at a time).
    Refused with ``rerank`` and in fp16 / bf16.

    Ties: a candidate with the same score as the positive ranks ahead of it only if its
    gallery index is lower, so results are the same on every run and device.
    """
    if item_emb.ndim != 2 or text_emb.ndim != 2 or item_emb.shape[1] != text_emb.shape[1]:
        raise ValueError(f"expected item_emb (N, D) and text_emb (M, D), found "
                         f"{tuple(item_emb.shape)} and {tuple(text_emb.shape)}")
    if text_owner.shape != (text_emb.shape[0],):
        raise ValueError(f"text_owner must be ({text_emb.shape[0]},), found {tuple(text_owner.shape)}")
    n = item_emb.shape[0]
    if text_owner.numel() and (text_owner.min() < 0 or text_owner.max() >= n):
        raise ValueError(f"text_owner values must lie in [0, {n}), found "
                         f"[{int(text_owner.min())}, {int(text_owner.max())}]")
    missing = torch.ones(n, dtype=torch.bool)
    missing[text_owner.cpu()] = False
    if missing.any():
        raise ValueError(f"{int(missing.sum())} item(s) have no text, e.g. index {int(missing.nonzero()[0])}")
    if precision not in _PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(_PRECISIONS)}, found {precision!r}")
    if rerank is not None and (rerank_k < 1 or rerank_batch < 1):
        raise ValueError(f"rerank_k and rerank_batch must be >= 1, found {rerank_k} and {rerank_batch}")
    if not ks and not rank_metrics:
        raise ValueError("nothing to compute: ks (recall@k) and rank_metrics are both empty; give at least one")
    graded = False
    for name in rank_metrics:
        kind, k = parse_rank_metric(name)
        graded |= kind in GRADED
        if precision != "fp32" and kind in GRADED:
            raise ValueError(f"rank metric {name!r} needs the rank of every positive, which precision="
                             f"{precision!r} does not make exact; use precision='fp32'")
        if precision != "fp32" and (k is None or k > max(ks, default=0)):
            raise ValueError(f"rank metric {name!r} needs ranks beyond "
                             f"{f'max(ks) = {max(ks)}' if ks else 'any recall k (ks is empty)'}, which "
                             f"precision={precision!r} does not make exact; use precision='fp32'")
    if renorm is not None and rerank is not None:
        raise ValueError("renorm cannot be combined with rerank: re-ranking re-scores the first stage's top "
                         "candidates, re-normalisation replaces the first stage's scores; use one of them")
    if renorm is not None and precision != "fp32":
        raise ValueError(f"renorm needs precision='fp32' (its transformed scores are computed from float32 "
                         f"scores), found precision={precision!r}")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1 or None, found {chunk_size}")
    device = torch.device(device) if device is not None else item_emb.device
    if device.type == "cpu":  # numba's counting loops for large work; its CPU tile share, calibrated once a machine
        _count_kernels.prepare(len(item_emb) * len(text_emb), saving=_tile_calibration.count_saving,
                               weight=1.0 if renorm is None else _count_kernels.RENORM_WEIGHT)
        _tile_calibration.ensure(len(item_emb) * len(text_emb), l2_share(), retrieval_recall)
    matrix = ScoreMatrix(item_emb, text_emb, text_owner, device=device,
                         max_chunk_bytes=max_chunk_bytes, chunk_size=chunk_size)
    pairs = None
    bounds = diagonal_blocks(matrix, buffers=2 if renorm is None else 3) if rerank is None and precision == "fp32" else None
    keys = renorm_keys(renorm, matrix, grouped=bounds is not None) if renorm is not None else None
    if rerank is not None:
        if graded:  # the best text's rank is the least of its item's texts' ranks
            pairs = row_pair_ranks(matrix, matrix.arange(n), torch.empty(matrix.n_texts, dtype=torch.long,
                                   device=device), rerank, rerank_k, rerank_batch)
            i2t = least_per_item(pairs, matrix.owner, n)
        else:
            i2t = row_ranks(matrix, "i2t", matrix.arange(n), rerank, rerank_k, rerank_batch)
        t2i = row_ranks(matrix, "t2i", matrix.arange(matrix.n_texts), rerank, rerank_k, rerank_batch)
    elif precision == "fp32":
        if bounds is not None:
            i2t, t2i, *found = grouped_ranks(matrix, bounds, pair_ranks=graded, keys=keys)
            pairs = found[0] if graded else None
        elif keys is not None:  # row-wise, each direction: a chunk of queries x the whole gallery
            if graded:
                pairs = row_pair_ranks(matrix, matrix.arange(n), torch.empty(matrix.n_texts, dtype=torch.long,
                                       device=device), keys=keys)
                i2t = least_per_item(pairs, matrix.owner, n)
            else:
                i2t = row_ranks(matrix, "i2t", matrix.arange(n), keys=keys)
            t2i = row_ranks(matrix, "t2i", matrix.arange(matrix.n_texts), keys=keys)
        else:
            i2t, t2i, *found = exact_ranks(matrix, pair_ranks=graded)
            pairs = found[0] if graded else None
    else:
        i2t, t2i = bracketed_ranks(matrix, _PRECISIONS[precision], max(ks))
    best_names = [m for m in rank_metrics if parse_rank_metric(m)[0] not in GRADED]
    graded_names = [m for m in rank_metrics if parse_rank_metric(m)[0] in GRADED]
    out: dict = {}
    for name, ranks in (("i2t", i2t), ("t2i", t2i)):
        for k in ks:  # from integer counts, so that e.g. 89 hits of 300 give 100 * 89 / 300 exactly
            out[f"{name}_r{k}"] = 100.0 * int((ranks < k).sum()) / len(ranks)
        if ks:
            out[f"{name}_mean"] = sum(out[f"{name}_r{k}"] for k in ks) / len(ks)
        out.update({f"{name}_{metric}": value for metric, value in _rank_metrics(ranks.cpu(), best_names).items()}
                   if best_names else {})
        if graded_names:  # text-to-image: one positive per text, its pair rank is its rank
            pair_ranks, query = (pairs, matrix.owner) if name == "i2t" else (t2i, matrix.arange(len(t2i)))
            graded_values = graded_rank_metrics(pair_ranks.cpu(), query.cpu(), len(ranks), graded_names)
            out.update({f"{name}_{metric}": value for metric, value in graded_values.items()})
    if ks:
        out["r_mean"] = (out["i2t_mean"] + out["t2i_mean"]) / 2
    if renorm is not None:
        out["renorm"] = renorm.record()
    if return_ranks:
        out["i2t_ranks"], out["t2i_ranks"] = i2t.cpu(), t2i.cpu()
        if pairs is not None:
            out["i2t_pair_ranks"] = pairs.cpu()
    return out


from vlr_plugins.registry import METRICS

METRICS.register(retrieval_recall, name="retrieval_recall")
