"""Rank metrics of the best positive: MdR, MnR and MRR@k, from the exact ranks the engine gives.

The recall engine (:func:`~vlr_plugins.eval.retrieval_recall`) computes, in bounded
memory, the 0-based rank of every query's best positive under its tie rule (a candidate
with the positive's exact score is ahead only when its gallery index is lower). Median
rank, mean rank and the reciprocal rank of the best positive are functions of those ranks
alone, so they are exact wherever the ranks are and cost nothing beyond them:

- ``mdr``: median of the 1-based ranks (the middle two averaged for an even count, as
  ``np.median`` in CLIP4Clip / UMT's evaluation code);
- ``mnr``: their mean;
- ``mrr@k``: mean over queries of ``1 / rank`` (1-based) when the best positive is in the
  top ``k``, else 0 (MTEB's and torchmetrics' ``RetrievalMRR(top_k=k)`` for one relevant
  document, and for several: the first relevant one is the best positive).

Metrics graded over every positive (mAP@k, nDCG@k) need the rank of each positive pair,
not only the best one: :mod:`~vlr_plugins.eval.graded_metrics`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vlr_plugins.eval.metric_names import GRADED, RANK_METRICS, parse_rank_metric

__all__ = ["RANK_METRICS", "check_ranks", "parse_rank_metric", "rank_metrics"]


def rank_metrics(ranks: torch.Tensor, metrics: Sequence[str]) -> dict[str, float]:
    """``{metric: value}`` of the 0-based best-positive ``ranks`` (one per query), for each of
    ``metrics`` (``mdr``, ``mnr``, ``mrr@K``). MdR and MnR are 1-based ranks; MRR@k lies in
    [0, 1]. ``map@K`` / ``ndcg@K`` are refused: they need every positive's rank
    (:func:`~vlr_plugins.eval.graded_metrics.graded_rank_metrics`).

    Example: ranks ``[0, 2, 9]`` give ``mdr`` 3.0, ``mnr`` 4.33..., ``mrr@5`` (1 + 1/3 + 0) / 3.
    """
    check_ranks(ranks)
    for name in metrics:
        if parse_rank_metric(name)[0] in GRADED:
            raise ValueError(f"{name!r} is graded over every positive of a query: it needs the rank of every "
                             "positive pair (graded_rank_metrics), not the best positive's")
    one_based = ranks.to(torch.float64) + 1
    out: dict[str, float] = {}
    for name in metrics:
        kind, k = parse_rank_metric(name)
        if kind == "mdr":
            ordered = one_based.sort().values
            middle = len(ordered) // 2
            out[name] = float(ordered[middle]) if len(ordered) % 2 else float(ordered[middle - 1:middle + 1].mean())
        elif kind == "mnr":
            out[name] = float(one_based.mean())
        else:
            out[name] = float(torch.where(one_based <= k, 1.0 / one_based, 0.0).mean())
    return out


def check_ranks(ranks: torch.Tensor) -> None:
    """``ValueError`` unless ``ranks`` is a non-empty 1-D tensor of non-negative integers."""
    if ranks.ndim != 1 or ranks.numel() == 0:
        raise ValueError(f"expected a non-empty (Q,) tensor of ranks, found shape {tuple(ranks.shape)}")
    if ranks.dtype.is_floating_point or ranks.dtype == torch.bool:
        raise ValueError(f"ranks are integers (0-based), found {ranks.dtype}")
    if int(ranks.min()) < 0:
        raise ValueError(f"ranks are 0-based and non-negative, found {int(ranks.min())}")
