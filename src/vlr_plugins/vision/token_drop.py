"""Video-token dropping: the encoder sees a random subset of its space-time tokens.

UMT (Li et al., ICCV 2023, "Unmasked Teacher", sec. 3) trains its video encoder on the
visible tokens only: a per-video random subset (``random``) or the same patch positions in
every tubelet (``tube``), the rest never entering the transformer. MVC (multi-view
captions) keeps 90% of the tokens in video-text pretraining (a ratio of 0.1). Dropping
saves compute and acts as a regulariser; at evaluation nothing is dropped.

A leaf: imports only torch.
"""

from __future__ import annotations

import torch

__all__ = ["TOKEN_DROP_MODES", "keep_index", "gather_tokens"]

TOKEN_DROP_MODES = ("random", "tube")


def keep_index(batch: int, grid: tuple[int, int, int], ratio: float, mode: str = "random",
               *, device: torch.device | str | None = None,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """The tokens each video keeps: (batch, N_keep) indices into the T*H*W grid, ascending.

    ``ratio`` of the tokens are dropped, rounded down as UMT's mask generators do:
    ``random`` keeps ``N - int(ratio*N)`` of the ``N = T*H*W`` tokens, chosen independently
    per video; ``tube`` keeps ``S - int(ratio*S)`` of the ``S = H*W`` patch positions and
    keeps them in every tubelet.
    """
    if not 0.0 <= ratio < 1.0:
        raise ValueError(f"a token drop ratio must be in [0, 1), got {ratio}")
    if mode not in TOKEN_DROP_MODES:
        raise ValueError(f"token drop mode must be one of {TOKEN_DROP_MODES}, got {mode!r}")
    t, h, w = grid
    per = t * h * w if mode == "random" else h * w
    keep = per - int(ratio * per)
    noise = torch.rand(batch, per, device=device, generator=generator)
    index = noise.argsort(dim=1)[:, :keep].sort(dim=1).values
    if mode == "tube":
        offsets = torch.arange(t, device=index.device)[:, None] * (h * w)
        index = (offsets[None] + index[:, None, :]).reshape(batch, t * keep)
    return index


def gather_tokens(tokens: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """tokens: (B, N, D), index: (B, K) -> (B, K, D), the indexed tokens of each video."""
    return tokens.gather(1, index[:, :, None].expand(-1, -1, tokens.shape[-1]))
