"""A tiny stand-in for UMT's BERT (tests only): it implements the four methods of
:class:`vlr_plugins.losses.VideoTextFusion` with a handful of weights, so the VTM / MLM
tests run without transformers.

Padding is masked exactly (``-inf`` attention, masked means), so padded positions never
change a real position's output: trimming or padding a batch leaves every [CLS] state as is.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class TinyVideoTextModel(nn.Module):
    """Text layer: word embeddings, position 0 replaced by the row's view CLS, plus the
    caption's masked mean. Fusion layer: masked single-head cross-attention to the video
    tokens plus the caption's masked mean. Heads: ``Linear(H, 2)`` and an MLM head tied to
    the word embeddings. Weights come from ``seed`` (identical in every process)."""

    def __init__(self, vocab_size: int = 40, hidden: int = 8, video_dim: int = 6,
                 num_views: int = 2, seed: int = 0, dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        self.words = nn.Embedding(vocab_size, hidden)
        self.view_cls = nn.Embedding(num_views, hidden)
        self.video_in = nn.Linear(video_dim, hidden)
        self.mix = nn.Linear(2 * hidden, hidden)
        self.match_head = nn.Linear(hidden, 2)
        self.mlm_bias = nn.Parameter(torch.zeros(vocab_size))
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
        self.to(dtype)

    @staticmethod
    def _masked_mean(hidden: Tensor, mask: Tensor) -> Tensor:
        m = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * m).sum(1, keepdim=True) / m.sum(1, keepdim=True)

    def encode_text_tokens(self, input_ids: Tensor, attention_mask: Tensor,
                           view_ids: Tensor | None) -> Tensor:
        h = self.words(input_ids)
        if view_ids is not None:
            h = torch.cat([self.view_cls(view_ids).unsqueeze(1), h[:, 1:]], dim=1)
        return torch.tanh(h + self._masked_mean(h, attention_mask))

    def fuse(self, text_hidden: Tensor, text_mask: Tensor, video_tokens: Tensor,
             video_mask: Tensor) -> Tensor:
        v = self.video_in(video_tokens)
        scores = text_hidden @ v.transpose(1, 2) / math.sqrt(v.shape[-1])
        scores = scores.masked_fill(~video_mask.bool().unsqueeze(1), float("-inf"))
        attended = scores.softmax(dim=-1) @ v
        context = self._masked_mean(text_hidden, text_mask).expand_as(text_hidden)
        return torch.tanh(self.mix(torch.cat([text_hidden + attended, context], dim=-1)))

    def match_logits(self, cls_hidden: Tensor) -> Tensor:
        return self.match_head(cls_hidden)

    def mlm_logits(self, hidden: Tensor) -> Tensor:
        return hidden @ self.words.weight.T + self.mlm_bias


def video_text_batch(num_videos: int, lengths: list[int], owner: list[int], *, seed: int,
                     vocab_size: int = 40, hidden: int = 8, video_dim: int = 6,
                     num_video_tokens: int = 5, dim: int = 4) -> dict[str, Tensor]:
    """Random float64 inputs of the video-text losses: one caption per entry of ``lengths``
    (its number of real tokens, [CLS] 1 first, [SEP] 2 last, padding 0), ``owner`` its video."""
    g = torch.Generator().manual_seed(seed)
    longest = max(lengths)
    ids = torch.zeros(len(lengths), longest, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(5, vocab_size, (n,), generator=g)
        ids[row, 0], ids[row, n - 1] = 1, 2
    return {
        "video_emb": torch.randn(num_videos, dim, generator=g, dtype=torch.float64),
        "text_emb": torch.randn(len(lengths), dim, generator=g, dtype=torch.float64),
        "text_owner": torch.tensor(owner),
        "video_tokens": torch.randn(num_videos, num_video_tokens, video_dim, generator=g,
                                    dtype=torch.float64),
        "text_hidden": torch.randn(len(lengths), longest, hidden, generator=g, dtype=torch.float64),
        "input_ids": ids,
        "attention_mask": (ids != 0).long(),
    }
