"""The (item, text) pairs a re-ranking hook scores: each query with each of its candidates.

:func:`~vlr_plugins.eval.retrieval_recall` calls its ``rerank(queries (Q,), candidates (Q, K),
direction)`` hook with each query's top K; a matching head (BLIP's ITM, a ``match_scores``)
scores (item, text) pairs, so the hook spreads the queries over their candidates in the
order of the candidates, query by query.
"""

from __future__ import annotations

import torch

__all__ = ["rerank_pairs"]


def rerank_pairs(queries: torch.Tensor, candidates: torch.Tensor, direction: str
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(item rows (Q*K,), text rows (Q*K,))``: pair ``q * K + j`` is query ``q`` with its
    ``j``-th candidate.

    ``queries``: (Q,) row indices; ``candidates``: (Q, K) row indices. For ``"i2t"`` the
    queries are items and the candidates texts; for ``"t2i"`` the other way round. The
    rows stay on the device they came on; scores for the pairs reshape to (Q, K).

    Example::

        items, texts = rerank_pairs(torch.tensor([0, 1]), torch.tensor([[5, 7], [7, 2]]), "i2t")
        # items [0, 0, 1, 1], texts [5, 7, 7, 2]
    """
    q, k = candidates.shape
    spread = queries[:, None].expand(q, k)
    items, texts = (spread, candidates) if direction == "i2t" else (candidates, spread)
    return items.reshape(-1), texts.reshape(-1)
