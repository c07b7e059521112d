"""Last-token pooling: the hidden state at each row's last real token (E5-V, CaRe).

With left padding (how E5-V and CaReBench batch) that is the last column; with right
padding it is the last position the attention mask keeps. Both are handled, so a
batch padded either way pools the same states.
"""

from __future__ import annotations

import torch

__all__ = ["last_token_pool"]


def last_token_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """``hidden`` (B, L, D), ``attention_mask`` (B, L) of 0/1 -> (B, D): each row's state at
    its last position with mask 1.

    Example::

        emb = last_token_pool(model(**batch).last_hidden_state, batch["attention_mask"])
    """
    if hidden.ndim != 3 or attention_mask.shape != hidden.shape[:2]:
        raise ValueError(f"last_token_pool: expected hidden (B, L, D) and attention_mask (B, L); found "
                         f"{tuple(hidden.shape)} and {tuple(attention_mask.shape)}")
    mask = attention_mask.bool()
    if not bool(mask.any(1).all()):
        empty = (~mask.any(1)).nonzero().flatten().tolist()
        raise ValueError(f"last_token_pool: rows {empty[:10]} have no token (all padding)")
    if bool(mask[:, -1].all()):  # left padding, or no padding
        return hidden[:, -1]
    last = mask.shape[1] - 1 - mask.flip(1).int().argmax(1)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
