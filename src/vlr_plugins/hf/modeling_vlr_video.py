"""The video tower of an MVC export: vlr-plugins' ``SpaceTimeViT`` restated in plain torch.

Clips (B, T, 3, S, S), already sampled and normalised (``VlrVideoProcessor``) -> (B, D):

    tokens = norm(blocks(patch_embed(clip) + positions));  pooled = pool_norm(mean(tokens))
    embedding = normalize(proj(pooled))

Parameter names are those of ``vlr_plugins.vision.SpaceTimeViT`` (whose blocks are timm's
ViT ``Block``: ``norm1``, ``attn.qkv``, ``attn.proj``, ``ls1.gamma``, ``norm2``, ``mlp.fc1``,
``mlp.fc2``, ``ls2.gamma``), so its state dict loads 1:1. The fixed sin-cos position tables
are not weights: they are rebuilt from the config (:meth:`VlrSpaceTimeViT.position_tables`).

This file is copied beside exported weights and imported where vlr-plugins (and timm) is
not installed: it imports only ``torch`` and ``.configuration_vlr_video``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .configuration_vlr_video import check_video_config

__all__ = ["VlrSpaceTimeViT"]


def _sincos_table(length: int, dim: int) -> torch.Tensor:
    # the Transformer paper's table, as vlr_plugins.vision.positions.sincos_table
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    pair = torch.div(torch.arange(dim), 2, rounding_mode="floor").to(torch.float64)
    angle = pos / torch.pow(10000.0, 2.0 * pair / dim)[None, :]
    table = torch.empty(length, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle[:, 0::2])
    table[:, 1::2] = torch.cos(angle[:, 1::2])
    return table.float()


def _video_table(grid: tuple[int, int, int], dim: int, source: tuple[int, int, int]) -> torch.Tensor:
    # vlr_plugins.vision.positions.sincos_video_table: made for the trained grid, resampled
    # bicubically over the patch grid, then linearly over time
    t0, h0, w0 = source
    table = _sincos_table(t0 * h0 * w0, dim).reshape(t0, h0 * w0, dim)
    if (h0, w0) != grid[1:]:
        planes = table.reshape(-1, h0, w0, dim).permute(0, 3, 1, 2).float()
        planes = F.interpolate(planes, size=grid[1:], mode="bicubic", align_corners=False)
        table = planes.permute(0, 2, 3, 1).reshape(t0, grid[1] * grid[2], dim)
    table = table.transpose(0, 1)
    if t0 != grid[0]:
        seq = table.transpose(1, 2).float()
        table = F.interpolate(seq, size=grid[0], mode="linear", align_corners=False).transpose(1, 2)
    return table.transpose(0, 1).reshape(-1, dim).contiguous()


class _LayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


class _Attention(nn.Module):
    # timm's Attention with fused attention (its default), no q/k norm
    def __init__(self, dim: int, num_heads: int, qkv_bias: bool) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


class _Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class _Block(nn.Module):
    # timm's vision_transformer.Block (pre-norm; layer scale when init_values is set)
    def __init__(self, dim: int, num_heads: int, mlp_ratio: float, qkv_bias: bool, eps: float,
                 layer_scale: bool) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = _Attention(dim, num_heads, qkv_bias)
        self.ls1 = _LayerScale(dim) if layer_scale else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = _Mlp(dim, int(dim * mlp_ratio))
        self.ls2 = _LayerScale(dim) if layer_scale else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.ls1(self.attn(self.norm1(x)))
        return x + self.ls2(self.mlp(self.norm2(x)))


class VlrSpaceTimeViT(nn.Module):
    """Joint space-time attention over tubelet tokens, built from a ``video_config`` dict
    (the fields of ``SpaceTimeViT.to_config()`` that shape the evaluated tower)."""

    def __init__(self, video_config: dict[str, Any]) -> None:
        super().__init__()
        cfg = check_video_config(video_config)
        self.num_frames, self.image_size = int(cfg["num_frames"]), int(cfg["image_size"])
        self.tubelet_size, width, patch = int(cfg["tubelet_size"]), int(cfg["width"]), int(cfg["patch_size"])
        self.grid = (self.num_frames // self.tubelet_size, self.image_size // patch, self.image_size // patch)
        self.pos_embed_kind = cfg.get("pos_embed", "sincos")
        self.source_grid = (int(cfg.get("pretrained_num_frames") or self.num_frames) // self.tubelet_size,
                            *(2 * [int(cfg.get("pretrained_image_size") or self.image_size) // patch]))
        self.width, self.normalize = width, bool(cfg.get("normalize", True))
        eps = float(cfg.get("layer_norm_eps", 1e-6))
        self.patch_embed = nn.Conv3d(3, width, kernel_size=(self.tubelet_size, patch, patch),
                                     stride=(self.tubelet_size, patch, patch))
        if self.pos_embed_kind == "learned":
            self.pos_embed_spatial = nn.Parameter(torch.zeros(1, self.grid[1] * self.grid[2], width))
            self.pos_embed_temporal = nn.Parameter(torch.zeros(1, self.grid[0], width))
        else:
            video, image = self.position_tables()
            self.register_buffer("pos_video", video, persistent=False)
            self.register_buffer("pos_image", image, persistent=False)
        self.blocks = nn.ModuleList(
            _Block(width, int(cfg["num_heads"]), float(cfg.get("mlp_ratio", 4.0)), bool(cfg.get("qkv_bias", True)),
                   eps, bool(cfg.get("init_values"))) for _ in range(int(cfg["depth"])))
        self.norm = nn.LayerNorm(width, eps=eps) if cfg.get("final_norm", True) else nn.Identity()
        pool_eps = cfg.get("pool_norm_eps")
        self.pool_norm = (nn.LayerNorm(width, eps=float(pool_eps) if pool_eps is not None else eps)
                          if cfg.get("pool_norm", False) else nn.Identity())
        embed_dim = cfg.get("embed_dim")
        self.proj = nn.Linear(width, int(embed_dim)) if embed_dim is not None else nn.Identity()
        self.embed_dim = int(embed_dim or width)

    def position_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The fixed sin-cos tables ``(pos_video (1, T*H*W, width), pos_image (1, H*W, width))``."""
        (_, h, w), source = self.grid, self.source_grid
        video = _video_table(self.grid, self.width, source)
        image = _video_table((1, h, w), self.width, (1, *source[1:]))
        return video[None], image[None]

    def _positions(self, tubelets: int) -> torch.Tensor:
        if self.pos_embed_kind == "learned":
            temporal = self.pos_embed_temporal[:, :tubelets]
            return (temporal[:, :, None] + self.pos_embed_spatial[:, None]).flatten(1, 2)
        return self.pos_image if tubelets == 1 and self.grid[0] != 1 else self.pos_video

    def forward(self, pixel_values_videos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T, 3, S, S), T = num_frames or 1 -> ``(embedding (B, D), tokens (B, N, width))``."""
        frames = pixel_values_videos
        if frames.dim() != 5 or tuple(frames.shape[2:]) != (3, self.image_size, self.image_size):
            raise ValueError(f"pixel_values_videos must be (B, T, 3, {self.image_size}, {self.image_size}), "
                             f"found {tuple(frames.shape)}; make them with the folder's video processor")
        if frames.shape[1] == 1 and self.num_frames != 1:
            frames = frames.expand(-1, self.tubelet_size, -1, -1, -1)
        elif frames.shape[1] != self.num_frames:
            raise ValueError(f"the video tower takes {self.num_frames}-frame clips (or single images), found "
                             f"{frames.shape[1]} frames; sample num_frames={self.num_frames} frames")
        x = self.patch_embed(frames.transpose(1, 2)).flatten(2).transpose(1, 2)
        x = x + self._positions(frames.shape[1] // self.tubelet_size).to(x.dtype)
        for block in self.blocks:
            x = block(x)
        tokens = self.norm(x)
        embedding = self.proj(self.pool_norm(tokens.mean(dim=1)))
        return (F.normalize(embedding, dim=-1) if self.normalize else embedding), tokens

    @property
    def num_tokens(self) -> int:
        return math.prod(self.grid)
