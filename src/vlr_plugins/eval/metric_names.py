"""The names of the rank metrics the recall engine reports beside recall@k.

``mdr``, ``mnr`` and ``mrr@K`` are functions of each query's best positive's rank
(:mod:`~vlr_plugins.eval.best_rank_metrics`); ``map@K`` and ``ndcg@K`` are graded over
every positive of a query (:mod:`~vlr_plugins.eval.graded_metrics`), so the engine
ranks every positive pair for them.
"""

from __future__ import annotations

import re

__all__ = ["GRADED", "RANK_METRICS", "parse_rank_metric"]

#: the metric names the engine takes (``K`` any integer >= 1)
RANK_METRICS = ("mdr", "mnr", "mrr@K", "map@K", "ndcg@K")
#: the kinds that need the rank of every positive pair, not only the best one
GRADED = frozenset({"map", "ndcg"})
_AT_K = re.compile(r"(mrr|map|ndcg)@([1-9][0-9]*)")


def parse_rank_metric(name: str) -> tuple[str, int | None]:
    """``("mdr", None)``, ``("mnr", None)``, or ``(kind, k)`` for ``"mrr@k"``, ``"map@k"`` and
    ``"ndcg@k"``; ``ValueError`` naming the known metrics otherwise."""
    if name in ("mdr", "mnr"):
        return name, None
    found = _AT_K.fullmatch(name) if isinstance(name, str) else None
    if found:
        return found.group(1), int(found.group(2))
    raise ValueError(f"unknown rank metric {name!r}; known: {', '.join(RANK_METRICS)}")
