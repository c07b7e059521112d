"""BLIP's text encoder and text projection: the half that paragraph supervision trains."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vlr_plugins.registry import MODELS

__all__ = ["BlipTextEncoder"]


@MODELS.register
class BlipTextEncoder(nn.Module):
    """BLIP text encoder + ``text_proj``: texts -> L2-normalised embeddings in BLIP's ITC space.

    Expects ``input_ids`` / ``attention_mask`` (N, L) from BLIP's (BERT) tokenizer, with
    ``[CLS]`` first. Embedding = normalize(text_proj(text_encoder(ids)[:, 0])), exactly the
    text side of ``BlipForImageTextRetrieval(use_itm_head=False)`` in transformers.

    Reference: Li et al., BLIP (ICML 2022); the paragraph-supervision paper (sec. 3.2)
    trains only this module against frozen image embeddings.

    Built either from a pretrained retrieval checkpoint (``pretrained=
    "Salesforce/blip-itm-base-coco"`` or a local folder; only the text half is kept) or
    from a text config for a random-init model (``config={...BlipTextConfig kwargs}``,
    ``embed_dim``). ``tokenizer`` names where its tokenizer lives (defaults to
    ``pretrained``). The layers' cross-attention weights (used only by BLIP's ITM and
    captioning heads) are frozen: nothing in contrastive training reaches them.

    Example::

        enc = BlipTextEncoder(config=dict(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                          num_attention_heads=2, intermediate_size=64), embed_dim=16)
        emb = enc(torch.randint(5, 100, (3, 7)), torch.ones(3, 7, dtype=torch.long))  # (3, 16)
    """

    def __init__(
        self,
        pretrained: str | None = None,
        config: dict[str, Any] | None = None,
        embed_dim: int = 256,
        tokenizer: str | None = None,
        revision: str | None = None,
    ) -> None:
        super().__init__()
        from transformers import BlipForImageTextRetrieval, BlipTextConfig, BlipTextModel

        if (pretrained is None) == (config is None):
            raise ValueError("BlipTextEncoder needs exactly one of pretrained= or config=")
        if pretrained is not None:
            full = BlipForImageTextRetrieval.from_pretrained(pretrained, revision=revision)
            self.text_encoder = full.text_encoder
            self.text_proj = full.text_proj
            del full
        else:
            cfg = BlipTextConfig(**config)
            self.text_encoder = BlipTextModel(cfg, add_pooling_layer=False)
            self.text_proj = nn.Linear(cfg.hidden_size, embed_dim)
        # BLIP's text layers carry cross-attention for the ITM/decoder paths; contrastive
        # text-only training never reaches it, and trainable parameters without gradients
        # break DistributedDataParallel, so it is frozen (and kept, for a full BLIP export).
        for name, param in self.text_encoder.named_parameters():
            if "crossattention" in name:
                param.requires_grad_(False)
        self.pretrained = pretrained
        self.tokenizer_path = tokenizer or pretrained

    @property
    def embed_dim(self) -> int:
        return self.text_proj.out_features

    @property
    def max_positions(self) -> int:
        return self.text_encoder.config.max_position_embeddings

    def to_config(self) -> dict[str, Any]:
        """A registry config that rebuilds this architecture without downloading weights.

        Plain JSON types only, so it can ride in a weights-only checkpoint; load the
        state dict into ``MODELS.build(enc.to_config())`` to restore the encoder.
        """
        import json

        return {
            "type": type(self).__name__,
            "config": json.loads(self.text_encoder.config.to_json_string(use_diff=False)),
            "embed_dim": self.embed_dim,
            "tokenizer": self.tokenizer_path,
        }

    def load_tokenizer(self):
        """The tokenizer this encoder was trained with (``AutoTokenizer``; local files first)."""
        from transformers import AutoTokenizer

        if self.tokenizer_path is None:
            raise ValueError("this BlipTextEncoder was built from a config without tokenizer=")
        return AutoTokenizer.from_pretrained(self.tokenizer_path)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """input_ids, attention_mask: (N, L) -> (N, embed_dim), unit norm."""
        if input_ids.shape[1] > self.max_positions:
            raise ValueError(f"texts of {input_ids.shape[1]} tokens exceed the encoder's "
                             f"{self.max_positions} positions")
        hidden = self.text_encoder(input_ids=input_ids, attention_mask=attention_mask,
                                   return_dict=True).last_hidden_state
        return F.normalize(self.text_proj(hidden[:, 0, :]), dim=-1)
