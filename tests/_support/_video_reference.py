"""Plain references for the video tests: the sinusoid table, VideoMAE-code / UMT checkpoints in
their own parameter names, and their forward pass written out from the papers' formulas."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def sinusoid(length: int, dim: int) -> torch.Tensor:
    """The Transformer paper's table, one Python float at a time: (length, dim)."""
    rows = []
    for p in range(length):
        angles = [p / 10000 ** (2 * (j // 2) / dim) for j in range(dim)]
        rows.append([math.sin(a) if j % 2 == 0 else math.cos(a) for j, a in enumerate(angles)])
    return torch.tensor(rows, dtype=torch.float32)


def code_layout_encoder(prefix: str, *, width: int = 32, depth: int = 2, mlp: int = 64, tubelet: int = 1,
                        patch: int = 16, final_norm: bool = True, seed: int = 0) -> dict[str, torch.Tensor]:
    """An encoder state dict with the names VideoMAE's code, UMT and SMILE give their ViT
    (``patch_embed.proj``, ``blocks.N.attn.qkv`` + ``q_bias`` / ``v_bias``, ``norm``), under ``prefix``."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape: int, centre: float = 0.0) -> torch.Tensor:
        return centre + 0.2 * torch.randn(*shape, generator=g)

    sd = {f"{prefix}patch_embed.proj.weight": r(width, 3, tubelet, patch, patch),
          f"{prefix}patch_embed.proj.bias": r(width)}
    for i in range(depth):
        b = f"{prefix}blocks.{i}."
        sd.update({
            b + "norm1.weight": r(width, centre=1.0), b + "norm1.bias": r(width),
            b + "attn.qkv.weight": r(3 * width, width),
            b + "attn.q_bias": r(width), b + "attn.v_bias": r(width),
            b + "attn.proj.weight": r(width, width), b + "attn.proj.bias": r(width),
            b + "norm2.weight": r(width, centre=1.0), b + "norm2.bias": r(width),
            b + "mlp.fc1.weight": r(mlp, width), b + "mlp.fc1.bias": r(mlp),
            b + "mlp.fc2.weight": r(width, mlp), b + "mlp.fc2.bias": r(width),
        })
    if final_norm:
        sd.update({f"{prefix}norm.weight": r(width, centre=1.0), f"{prefix}norm.bias": r(width)})
    return sd


def code_layout_forward(sd: dict[str, torch.Tensor], prefix: str, frames: torch.Tensor,
                        positions: torch.Tensor, *, heads: int, eps: float = 1e-6) -> torch.Tensor:
    """frames (B, T, 3, H, W) -> tokens (B, N, D) through the encoder ``sd`` (VideoMAE / UMT math:
    pre-norm blocks, attention with q and v biases only, exact GELU, final norm when present)."""
    w = {k[len(prefix):]: v for k, v in sd.items() if k.startswith(prefix)}
    kernel = w["patch_embed.proj.weight"].shape[2:]
    x = F.conv3d(frames.transpose(1, 2), w["patch_embed.proj.weight"], w["patch_embed.proj.bias"],
                 stride=kernel)
    x = x.flatten(2).transpose(1, 2) + positions
    b, n, d = x.shape
    i = 0
    while f"blocks.{i}.norm1.weight" in w:
        p = f"blocks.{i}."
        y = F.layer_norm(x, (d,), w[p + "norm1.weight"], w[p + "norm1.bias"], eps)
        bias = torch.cat([w[p + "attn.q_bias"], torch.zeros(d), w[p + "attn.v_bias"]])
        qkv = F.linear(y, w[p + "attn.qkv.weight"], bias).reshape(b, n, 3, heads, d // heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attn = ((q * (d // heads) ** -0.5) @ k.transpose(-2, -1)).softmax(dim=-1)
        y = (attn @ v).transpose(1, 2).reshape(b, n, d)
        x = x + F.linear(y, w[p + "attn.proj.weight"], w[p + "attn.proj.bias"])
        y = F.layer_norm(x, (d,), w[p + "norm2.weight"], w[p + "norm2.bias"], eps)
        x = x + F.linear(F.gelu(F.linear(y, w[p + "mlp.fc1.weight"], w[p + "mlp.fc1.bias"])),
                         w[p + "mlp.fc2.weight"], w[p + "mlp.fc2.bias"])
        i += 1
    if "norm.weight" in w:
        x = F.layer_norm(x, (d,), w["norm.weight"], w["norm.bias"], eps)
    return x
