"""Plain reference rankers and test problems for the retrieval tests.

``reference_ranks`` builds the full float64 score matrix and sorts each query's gallery
by (-score, index) in Python; ``ranks_of_best_positive`` is the chunked, masked ranker
the package used before its tiled engine (quick enough for problems of a few thousand).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` inside, restored after (the engine's CPU
    workers follow them)."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def score_matrix(items: torch.Tensor, texts: torch.Tensor) -> torch.Tensor:
    """(N, M) float64 cosine scores."""
    items, texts = items.double(), texts.double()
    return (items / items.norm(dim=1, keepdim=True)) @ (texts / texts.norm(dim=1, keepdim=True)).T


def gallery_order(scores_row: torch.Tensor) -> list[int]:
    """Gallery indices best first; equal scores by lower index."""
    return sorted(range(len(scores_row)), key=lambda j: (-scores_row[j].item(), j))


def reference_ranks(items, texts, owner, rerank_order=None, k=0) -> tuple[list[int], list[int]]:
    """0-based rank of each item's best text and each text's owner. ``rerank_order(order[:k])``
    re-orders a query's top k; positives outside it keep their rank."""
    S, owner = score_matrix(items, texts), owner.tolist()

    def rank(order, is_pos):
        first = next(pos for pos, g in enumerate(order) if is_pos(g))
        if rerank_order is not None and first < k:
            return next(pos for pos, g in enumerate(rerank_order(order[:k])) if is_pos(g))
        return first

    i2t = [rank(gallery_order(S[i]), lambda j, i=i: owner[j] == i) for i in range(len(items))]
    t2i = [rank(gallery_order(S[:, j]), lambda i, j=j: i == owner[j]) for j in range(len(texts))]
    return i2t, t2i


def ranks_of_best_positive(
    query: torch.Tensor,
    gallery: torch.Tensor,
    positive_mask_fn: Callable[[int, int], torch.Tensor],
    *,
    chunk_size: int = 1024,
) -> torch.Tensor:
    """0-based rank of each query's best-ranked positive in the gallery.

    query: (Q, D), gallery: (G, D), both already normalised. ``positive_mask_fn(start,
    stop)`` returns the (stop-start, G) boolean mask of positives for those queries.
    """
    idx = torch.arange(gallery.shape[0], device=gallery.device)
    ranks = torch.empty(query.shape[0], dtype=torch.long, device=gallery.device)
    for start in range(0, query.shape[0], chunk_size):
        stop = min(start + chunk_size, query.shape[0])
        scores = query[start:stop] @ gallery.T  # (c, G)
        masked = scores.masked_fill(~positive_mask_fn(start, stop), float("-inf"))
        # argmax returns the first maximal index: the best positive under the tie rule
        best = masked.argmax(dim=1, keepdim=True)
        best_score = scores.gather(1, best)
        ahead = (scores > best_score) | ((scores == best_score) & (idx[None, :] < best))
        ranks[start:stop] = ahead.sum(dim=1)
    return ranks


def random_problem(n_items=60, dim=16, seed=0, noise=1.2):
    """1-4 texts per item, interleaved; texts near their item so recall is neither 0 nor 100."""
    g = torch.Generator().manual_seed(seed)
    owner = torch.cat([torch.arange(n_items), torch.randint(0, n_items, (2 * n_items,), generator=g)])
    owner = owner[torch.randperm(len(owner), generator=g)]
    items = torch.randn(n_items, dim, generator=g)
    return items, items[owner] + noise * torch.randn(len(owner), dim, generator=g), owner


def near_tie_problem(seed=0, n_items=24, n_texts=80, per_text=6):
    """Items are basis vectors, so a score is a coordinate of the (unit) text. A text has
    its owner and 5 other items at 1/4 + k 2^-13 (k distinct per item), a private coordinate
    making its norm 1, zeros elsewhere. So a query's candidates sit 1.2e-4 apart or more:
    below fp16/bf16 resolution, far above float32 rounding, so float32 orders them right."""
    g = torch.Generator().manual_seed(seed)
    owner = torch.cat([torch.arange(n_items), torch.randint(0, n_items, (n_texts - n_items,), generator=g)])
    texts = torch.zeros(n_texts, n_items + n_texts, dtype=torch.float64)
    for j in range(n_texts):
        others = [i for i in torch.randperm(n_items, generator=g).tolist() if i != owner[j]]
        texts[j, [int(owner[j])] + others[:per_text - 1]] = 1.0
    for i in range(n_items):  # distinct offsets among the texts holding item i
        holders = texts[:, i].nonzero().flatten()
        k = torch.randperm(80, generator=g)[:len(holders)] - 40
        texts[holders, i] = 0.25 + k.double() * 2**-13
    texts[torch.arange(n_texts), n_items + torch.arange(n_texts)] = (1 - (texts**2).sum(1)).sqrt()
    return torch.eye(n_items, n_items + n_texts), texts.float(), owner


def recalls(result: dict) -> dict:
    """``retrieval_recall``'s result without the ranks."""
    return {k: v for k, v in result.items() if not k.endswith("_ranks")}
