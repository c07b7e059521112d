"""BLIP's text encoder and text projection: the half that paragraph supervision trains."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vlr_plugins.errors import OFFLINE_DOC, ConfigError, ModelLoadError, loading_pretrained
from vlr_plugins.registry import MODELS
from vlr_plugins.text.pretrained import check_local_folder, load_tokenizer

__all__ = ["BlipTextEncoder", "TextEncoderShape"]


@dataclass(frozen=True)
class TextEncoderShape:
    """What a text encoder's arguments build, known without building it: its position
    table (the longest text it takes, special tokens included), its output width and its
    vocabulary size."""

    max_positions: int
    embed_dim: int
    vocab_size: int


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
            check_local_folder(pretrained, "model.pretrained")
            with loading_pretrained(pretrained, "model.pretrained"):
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

    @classmethod
    def describe(
        cls,
        pretrained: str | None = None,
        config: dict[str, Any] | None = None,
        embed_dim: int = 256,
        tokenizer: str | None = None,
        revision: str | None = None,
        *,
        setting: str = "model.pretrained",
    ) -> TextEncoderShape:
        """The :class:`TextEncoderShape` these arguments build, reading only the model's
        ``config.json`` (a pretrained model: cached, local or downloaded; no weights) or the
        given ``config``; for checks before training (budgets against positions, the image
        store's width against ``embed_dim``, the tokenizer against the vocabulary).

        Raises :class:`~vlr_plugins.errors.ModelLoadError` naming ``setting`` when the
        pretrained config cannot be had, ``ValueError`` for arguments no encoder is built from.
        """
        from transformers import BlipConfig, BlipTextConfig

        if (pretrained is None) == (config is None):
            raise ValueError("BlipTextEncoder needs exactly one of pretrained= or config=")
        if pretrained is not None:
            check_local_folder(pretrained, setting)
            if os.path.isdir(pretrained) and not os.path.isfile(os.path.join(pretrained, "config.json")):
                raise ModelLoadError(f"{setting}: {pretrained} holds no config.json (save a model there with "
                                     f"save_pretrained, or name a Hub id); see {OFFLINE_DOC}")
            with loading_pretrained(pretrained, setting):
                full = BlipConfig.from_pretrained(pretrained, revision=revision)
            text = full.text_config
            return TextEncoderShape(text.max_position_embeddings, full.image_text_hidden_size, text.vocab_size)
        try:
            text = BlipTextConfig(**config)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"not a BlipTextConfig: {e}") from e
        if text.hidden_size % text.num_attention_heads:
            raise ConfigError(f"hidden_size {text.hidden_size} is not a multiple of num_attention_heads "
                              f"{text.num_attention_heads}")
        return TextEncoderShape(text.max_position_embeddings, embed_dim, text.vocab_size)

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
        if self.tokenizer_path is None:
            raise ValueError("this BlipTextEncoder was built from a config without tokenizer=")
        return load_tokenizer(self.tokenizer_path, "model.tokenizer")

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """input_ids, attention_mask: (N, L) -> (N, embed_dim), unit norm."""
        if input_ids.shape[1] > self.max_positions:
            raise ValueError(f"texts of {input_ids.shape[1]} tokens exceed the encoder's "
                             f"{self.max_positions} positions")
        hidden = self.text_encoder(input_ids=input_ids, attention_mask=attention_mask,
                                   return_dict=True).last_hidden_state
        return F.normalize(self.text_proj(hidden[:, 0, :]), dim=-1)
