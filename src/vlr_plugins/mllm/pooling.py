"""Last-token pooling of padded batches (E5-V, CaRe): the state at each row's last real token,
and the positions that make a left-padded row compute as it does alone.

With left padding (how E5-V and CaReBench batch) the last real token is the last column;
with right padding it is the last position the attention mask keeps. Both are handled,
so a batch padded either way pools the same states. A left-padded row's first real token
must also sit at position 0, as it does alone: :func:`with_text_positions` gives text
batches those positions (Qwen2-VL counts a batch's media rows' positions from their mask
itself, but positions its text-only rows 0..L-1 over the padding: the same attention in
exact arithmetic, as RoPE is relative, yet other rounding, 7e-4 in bfloat16).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = ["last_token_pool", "with_text_positions"]


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


def with_text_positions(inputs: Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
    """``inputs`` plus ``position_ids`` (B, L) counting each row's real tokens from 0, when it
    holds an ``attention_mask``, no ``position_ids`` and no pixels (a text batch); else as is.

    Example::

        out = model.base_model(**with_text_positions(tokenizer(texts, padding_side="left", ...)))
    """
    if "position_ids" in inputs or "attention_mask" not in inputs or any(k.startswith("pixel_values") for k in inputs):
        return inputs
    return {**inputs, "position_ids": (inputs["attention_mask"].long().cumsum(1) - 1).clamp(min=0)}
