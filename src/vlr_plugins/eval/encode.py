"""Batched, progress-reporting text encoding at a token budget."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tqdm.auto import tqdm

__all__ = ["encode_texts", "length_order"]


def length_order(texts: Sequence[str]) -> list[int]:
    """The order :func:`encode_texts` embeds ``texts`` in: longest first, ties in input order
    (a stable sort, so a slice of this order, given again, keeps its order and its batches)."""
    return sorted(range(len(texts)), key=lambda i: -len(texts[i]))


@torch.inference_mode()
def encode_texts(
    encoder: torch.nn.Module,
    tokenizer,
    texts: Sequence[str],
    max_tokens: int,
    *,
    batch_size: int = 256,
    device: str | torch.device | None = None,
    progress: bool = True,
    desc: str = "encode texts",
    view: str | None = None,
) -> torch.Tensor:
    """Embed ``texts`` (M,) with ``encoder(input_ids, attention_mask)`` -> (M, D).

    Texts are cut to ``max_tokens`` (special tokens included), as during training.
    Longest texts go first so that batches are padded little and memory peaks early.
    ``view`` (an encoder with one CLS token per caption view, such as MVC's
    :class:`~vlr_plugins.text.DualCLSTextEncoder`): every text is encoded after that
    view's CLS, ``encoder(input_ids, attention_mask, view_ids)``; an encoder without views
    ignores it.
    """
    device = torch.device(device) if device is not None else next(encoder.parameters()).device
    was_training = encoder.training
    encoder.eval()
    view_id = encoder.view_index(view) if view is not None and hasattr(encoder, "view_index") else None
    order = length_order(texts)
    out: torch.Tensor | None = None
    try:
        for start in tqdm(range(0, len(texts), batch_size), desc=desc, disable=not progress,
                          unit="batch", leave=False):
            idx = order[start:start + batch_size]
            tok = tokenizer([texts[i] for i in idx], truncation=True, max_length=max_tokens,
                            padding=True, return_tensors="pt")
            args = [tok["input_ids"].to(device), tok["attention_mask"].to(device)]
            if view_id is not None:
                args.append(torch.full((len(idx),), view_id, dtype=torch.long, device=device))
            emb = encoder(*args).float().cpu()
            if out is None:
                out = torch.empty(len(texts), emb.shape[1])
            out[torch.tensor(idx)] = emb
    finally:
        encoder.train(was_training)
    if out is None:
        raise ValueError("no texts to encode")
    return out
