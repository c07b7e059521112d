"""mAP@k and nDCG@k: metrics graded over every positive of a query, from the rank of each
positive pair.

The engine (:func:`~vlr_plugins.eval.retrieval_recall`) ranks every positive pair in bounded
memory: positive ``p`` of query ``q`` gets its 0-based rank among the whole gallery (the
query's other positives included) under the engine's tie rule (a candidate with the
positive's exact score is ahead only when its gallery index is lower). That order is strict,
so a query's positives sorted by rank are its ranked list restricted to the positives, and
the ``m``-th of them (0-based) at rank ``r`` has ``m + 1`` positives in the top ``r + 1``.
With ``P`` positives, binary relevance and the cut-off ``k``:

- ``map@k``: ``sum over positives with r < k of (m + 1) / (r + 1)``, divided by ``P``:
  trec_eval's ``map_cut_k``, which MTEB reports as ``map_at_k``. torchmetrics'
  ``RetrievalMAP(top_k=k)`` divides by the positives found in the top ``k`` instead of
  ``P``; the two agree when ``k`` reaches the gallery size (plain average precision);
- ``ndcg@k``: ``sum over positives with r < k of 1 / log2(r + 2)``, divided by the ideal
  ``sum over i < min(P, k) of 1 / log2(i + 2)``: trec_eval's ``ndcg_cut_k`` (MTEB's
  ``ndcg_at_k``) and torchmetrics' ``RetrievalNormalizedDCG(top_k=k)`` with 0/1 targets.

Each is the mean over queries. With one positive per query (text-to-image) the pair ranks
are the queries' ranks: ``map@k`` is then MRR@k and ``ndcg@k`` ``mean(1 / log2(r + 2))``
over the hits.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vlr_plugins.eval.best_rank_metrics import check_ranks
from vlr_plugins.eval.metric_names import GRADED, parse_rank_metric

__all__ = ["graded_rank_metrics"]


def graded_rank_metrics(pair_ranks: torch.Tensor, pair_query: torch.Tensor, n_queries: int,
                        metrics: Sequence[str]) -> dict[str, float]:
    """``{metric: value}`` for each ``map@K`` / ``ndcg@K`` of ``metrics``.

    pair_ranks: (P,) 0-based rank of every positive pair; pair_query: (P,) its query, in
    [0, n_queries), every query with at least one positive. The ranks of one query's pairs
    must be distinct (they are under the engine's strict order).

    Example: one query whose two positives are at ranks 0 and 2 has ``map@10``
    (1/1 + 2/3) / 2 and ``ndcg@10`` (1 + 1/2) / (1 + 1/log2(3)).
    """
    check_ranks(pair_ranks)
    if pair_query.shape != pair_ranks.shape:
        raise ValueError(f"pair_query must be {tuple(pair_ranks.shape)} like pair_ranks, found {tuple(pair_query.shape)}")
    positives = torch.bincount(pair_query.long(), minlength=n_queries)
    if len(positives) != n_queries or int(pair_query.min()) < 0:
        raise ValueError(f"pair_query values must lie in [0, {n_queries})")
    if bool((positives == 0).any()):
        raise ValueError(f"{int((positives == 0).sum())} quer(ies) have no positive, e.g. "
                         f"{int((positives == 0).nonzero()[0])}")
    ranks, query = pair_ranks.long().cpu(), pair_query.long().cpu()
    order = torch.argsort(query * (int(ranks.max()) + 1) + ranks)  # by query, then by rank
    ranks, query = ranks[order], query[order]
    positives = positives.cpu()
    first = torch.cumsum(positives, 0) - positives
    place = torch.arange(len(ranks)) - first[query]  # m: the positives ranked ahead of this one
    if bool((ranks[1:] == ranks[:-1])[query[1:] == query[:-1]].any()):
        raise ValueError("two positive pairs of one query have the same rank")
    out: dict[str, float] = {}
    for name in metrics:
        kind, k = parse_rank_metric(name)
        if kind not in GRADED:
            raise ValueError(f"{name!r} is not graded over the positives: use rank_metrics on the best ranks")
        hit = ranks < k
        if kind == "map":
            gain = torch.where(hit, (place + 1).double() / (ranks + 1).double(), 0.0)
            per_query = torch.zeros(n_queries, dtype=torch.float64).index_add_(0, query, gain) / positives
        else:
            gain = torch.where(hit, 1.0 / torch.log2(ranks.double() + 2), 0.0)
            dcg = torch.zeros(n_queries, dtype=torch.float64).index_add_(0, query, gain)
            ideal = torch.arange(min(k, int(positives.max())), dtype=torch.float64)
            ideal_gains = torch.cumsum(1.0 / torch.log2(ideal + 2), 0)
            per_query = dcg / ideal_gains[positives.clamp_max(k) - 1]
        out[name] = float(per_query.mean())
    return out
