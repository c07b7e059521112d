"""Cross-attention from text tokens to video tokens: the block a fusion layer adds to a BERT layer."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["VideoCrossAttention"]


class VideoCrossAttention(nn.Module):
    """Multi-head attention of text states (queries) over video tokens (keys, values), with
    BERT's residual + LayerNorm: ``LayerNorm(text + dropout(dense(attend(text, video))))``.

    Expects ``text``: (N, L, hidden_size); ``video``: (N, T, video_width); ``video_mask``:
    (N, T), 1 where a video token may be attended, or ``None`` for all. Returns (N, L,
    hidden_size).

    The ``crossattention`` of UMT's fusion layers (Li et al., Unmasked Teacher, ICCV 2023,
    ``xbert.BertLayer``), whose keys and values read the video encoder's width
    (``encoder_width``). transformers' ``BertCrossAttention`` cannot: its keys read
    ``hidden_size``, and ``BertLayer`` adds it only to a (causal) decoder. Weights are
    initialised as BERT's: normal(0, ``initializer_range``), zero biases, unit LayerNorm.

    Example::

        xattn = VideoCrossAttention(hidden_size=32, video_width=48, num_heads=2)
        out = xattn(torch.randn(3, 7, 32), torch.randn(3, 10, 48))  # (3, 7, 32)
    """

    def __init__(self, hidden_size: int, video_width: int, num_heads: int, *, attention_dropout: float = 0.0,
                 hidden_dropout: float = 0.0, layer_norm_eps: float = 1e-12,
                 initializer_range: float = 0.02) -> None:
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(f"hidden_size {hidden_size} is not a multiple of num_heads {num_heads}")
        self.num_heads = num_heads
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(video_width, hidden_size)
        self.value = nn.Linear(video_width, hidden_size)
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)  # BERT's name, as in its state dicts
        self.attention_dropout = attention_dropout
        self.dropout = nn.Dropout(hidden_dropout)
        for linear in (self.query, self.key, self.value, self.dense):
            nn.init.normal_(linear.weight, std=initializer_range)
            nn.init.zeros_(linear.bias)

    @property
    def video_width(self) -> int:
        return self.key.in_features

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        n, length, width = x.shape
        return x.view(n, length, self.num_heads, width // self.num_heads).transpose(1, 2)

    def forward(self, text: torch.Tensor, video: torch.Tensor,
                video_mask: torch.Tensor | None = None) -> torch.Tensor:
        """text: (N, L, H), video: (N, T, video_width), video_mask: (N, T) or None -> (N, L, H)."""
        if video.dim() != 3 or video.shape[-1] != self.video_width or video.shape[0] != text.shape[0]:
            raise ValueError(f"video tokens must be (N={text.shape[0]}, T, {self.video_width}), "
                             f"found {tuple(video.shape)}")
        mask = None
        if video_mask is not None:
            if video_mask.shape != video.shape[:2]:
                raise ValueError(f"video_mask must be (N, T) = {tuple(video.shape[:2])}, "
                                 f"found {tuple(video_mask.shape)}")
            mask = video_mask.bool()[:, None, None, :]
        attended = F.scaled_dot_product_attention(
            self._heads(self.query(text)), self._heads(self.key(video)), self._heads(self.value(video)),
            attn_mask=mask, dropout_p=self.attention_dropout if self.training else 0.0)
        attended = attended.transpose(1, 2).reshape(text.shape)
        return self.LayerNorm(self.dropout(self.dense(attended)) + text)
