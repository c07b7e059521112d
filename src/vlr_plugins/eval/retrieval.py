"""Exact recall@k for retrieval with any number of texts per item, in bounded memory.

Queries are scored in chunks against the whole gallery and only each query's rank of
its best positive is kept, so the full (items x texts) score matrix never exists.

Ties are broken by gallery index: a candidate with the same score as the positive
ranks ahead of it only if its index is lower. The result is therefore the same on
every run and every device.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

__all__ = ["retrieval_recall", "ranks_of_best_positive"]

_DEFAULT_CHUNK_BYTES = 256 * 2**20


def ranks_of_best_positive(
    query: torch.Tensor,
    gallery: torch.Tensor,
    positive_mask_fn,
    *,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """0-based rank of each query's best-ranked positive in the gallery.

    query: (Q, D), gallery: (G, D), both already normalised. ``positive_mask_fn(start,
    stop)`` returns the (stop-start, G) boolean mask of positives for those queries.
    """
    q_count, g_count = query.shape[0], gallery.shape[0]
    if chunk_size is None:
        chunk_size = max(1, _DEFAULT_CHUNK_BYTES // (4 * max(g_count, 1)))
    idx = torch.arange(g_count, device=gallery.device)
    ranks = torch.empty(q_count, dtype=torch.long, device=gallery.device)
    for start in range(0, q_count, chunk_size):
        stop = min(start + chunk_size, q_count)
        scores = query[start:stop] @ gallery.T  # (c, G)
        pos = positive_mask_fn(start, stop)
        masked = scores.masked_fill(~pos, float("-inf"))
        # argmax returns the first maximal index: the best positive under our tie rule
        best = masked.argmax(dim=1, keepdim=True)
        best_score = scores.gather(1, best)
        ahead = (scores > best_score) | ((scores == best_score) & (idx[None, :] < best))
        ranks[start:stop] = ahead.sum(dim=1)
    return ranks


def retrieval_recall(
    item_emb: torch.Tensor,
    text_emb: torch.Tensor,
    text_owner: torch.Tensor,
    *,
    ks: Sequence[int] = (1, 5, 10),
    chunk_size: int | None = None,
    device: str | torch.device | None = None,
    return_ranks: bool = False,
) -> dict:
    """Recall@k (percent) in both directions.

    item_emb: (N, D) images or videos; text_emb: (M, D); text_owner: (M,) the item each
    text belongs to. Image-to-text is a hit when any of the item's texts is in the top
    k (LAVIS / CLIP_benchmark semantics); text-to-image when the owner is in the top k.
    Returns ``i2t_r{k}``, ``t2i_r{k}``, ``i2t_mean``, ``t2i_mean`` and ``r_mean``; with
    ``return_ranks`` also ``i2t_ranks`` (N,) and ``t2i_ranks`` (M,) tensors.
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
    device = torch.device(device) if device is not None else item_emb.device
    items = F.normalize(item_emb.to(device, torch.float32), dim=-1)
    texts = F.normalize(text_emb.to(device, torch.float32), dim=-1)
    owner = text_owner.to(device)
    item_idx = torch.arange(n, device=device)

    i2t = ranks_of_best_positive(
        items, texts, lambda a, b: owner[None, :] == item_idx[a:b, None], chunk_size=chunk_size
    )
    t2i = ranks_of_best_positive(
        texts, items, lambda a, b: item_idx[None, :] == owner[a:b, None], chunk_size=chunk_size
    )
    out: dict = {}
    for name, ranks in (("i2t", i2t), ("t2i", t2i)):
        for k in ks:
            out[f"{name}_r{k}"] = 100.0 * (ranks < k).float().mean().item()
        out[f"{name}_mean"] = sum(out[f"{name}_r{k}"] for k in ks) / len(ks)
    out["r_mean"] = (out["i2t_mean"] + out["t2i_mean"]) / 2
    if return_ranks:
        out["i2t_ranks"], out["t2i_ranks"] = i2t.cpu(), t2i.cpu()
    return out


from vlr_plugins.registry import METRICS  # noqa: E402

METRICS.register(retrieval_recall, name="retrieval_recall")
