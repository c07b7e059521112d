"""Space-time position tables: the fixed sin-cos table of VideoMAE / UMT, and resampling.

A video of ``T`` tubelets by an ``H x W`` patch grid is a sequence of ``T*H*W`` tokens in
the order ``Conv3d(...).flatten(2)`` gives (time, then rows, then columns). VideoMAE and UMT
add the 1-d sinusoid table of the Transformer paper over that flat index; a checkpoint
trained on another grid keeps its table's meaning when the table is made for the
checkpoint's grid and resampled to the new one: bicubically over the patch grid, then
linearly over time (UMT's ``get_sinusoid_encoding_table`` with ``ckpt_num_frame``, e.g. 8-frame
weights run on 16 frames). The same resampling serves learnt tables
(:func:`resample_spatial`, :func:`resample_temporal`).

A leaf: imports only torch.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["sincos_table", "sincos_video_table", "resample_spatial", "resample_temporal"]

Grid = tuple[int, int, int]  # (tubelets, patch rows, patch columns)


def sincos_table(length: int, dim: int) -> torch.Tensor:
    """The Transformer paper's sinusoid table: (length, dim), float32.

    Row ``p``, column ``j``: ``sin(p / 10000^(2*(j//2)/dim))`` for even ``j``, ``cos(...)``
    for odd ``j`` (the table VideoMAE and UMT add to their tokens).
    """
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    pair = torch.div(torch.arange(dim), 2, rounding_mode="floor").to(torch.float64)
    angle = pos / torch.pow(10000.0, 2.0 * pair / dim)[None, :]
    table = torch.empty(length, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle[:, 0::2])
    table[:, 1::2] = torch.cos(angle[:, 1::2])
    return table.float()


def sincos_video_table(grid: Grid, dim: int, source_grid: Grid | None = None) -> torch.Tensor:
    """The fixed table for ``grid`` = (T, H, W): (T*H*W, dim).

    ``source_grid``: the grid the weights were trained on (default ``grid``). When it
    differs, the table is made for ``source_grid`` and resampled to ``grid`` (patch grid
    bicubically, then time linearly), as UMT does for checkpoints of another frame count or
    resolution.
    """
    source = tuple(source_grid or grid)
    table = sincos_table(math.prod(source), dim)
    t0, h0, w0 = source
    table = resample_spatial(table.reshape(t0, h0 * w0, dim), (h0, w0), grid[1:])
    table = resample_temporal(table.transpose(0, 1), grid[0]).transpose(0, 1)
    return table.reshape(-1, dim).contiguous()


def resample_spatial(table: torch.Tensor, source: tuple[int, int], target: tuple[int, int]
                     ) -> torch.Tensor:
    """table: (..., H0*W0, D) -> (..., H*W, D), bicubic over the patch grid (align_corners=False)."""
    (h0, w0), (h, w) = tuple(source), tuple(target)
    if table.shape[-2] != h0 * w0:
        raise ValueError(f"a position table of {table.shape[-2]} rows does not cover a {h0}x{w0} patch grid")
    if (h0, w0) == (h, w):
        return table
    lead, dim = table.shape[:-2], table.shape[-1]
    grid = table.reshape(-1, h0, w0, dim).permute(0, 3, 1, 2).float()
    grid = F.interpolate(grid, size=(h, w), mode="bicubic", align_corners=False)
    return grid.permute(0, 2, 3, 1).reshape(*lead, h * w, dim).to(table.dtype)


def resample_temporal(table: torch.Tensor, length: int) -> torch.Tensor:
    """table: (..., T0, D) -> (..., length, D), linear over time (align_corners=False)."""
    if table.shape[-2] == length:
        return table
    lead, (t0, dim) = table.shape[:-2], table.shape[-2:]
    seq = table.reshape(-1, t0, dim).transpose(1, 2).float()
    seq = F.interpolate(seq, size=length, mode="linear", align_corners=False)
    return seq.transpose(1, 2).reshape(*lead, length, dim).to(table.dtype)
