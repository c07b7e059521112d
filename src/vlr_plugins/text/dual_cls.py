"""MVC's granularity-aware text encoder: BERT with one learnable CLS token per caption view,
its upper layers kept as UMT-style fusion layers (cross-attention to video) for VTM and MLM."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vlr_plugins.errors import OFFLINE_DOC, ConfigError, ModelLoadError, loading_pretrained
from vlr_plugins.registry import MODELS
from vlr_plugins.text.blip_text_encoder import TextEncoderShape
from vlr_plugins.text.pretrained import check_local_folder, load_tokenizer
from vlr_plugins.text.video_cross_attention import VideoCrossAttention
from vlr_plugins.text.view_names import VIEWS

__all__ = ["DualCLSTextEncoder", "DualCLSTextOutput", "VIEWS"]


@dataclass
class DualCLSTextOutput:
    """What :meth:`DualCLSTextEncoder.encode` returns.

    - ``embeds``: (N, embed_dim), unit norm: the text embedding (VTC, retrieval);
    - ``hidden``: (N, L, hidden_size): the text layers' last states, position 0 the view's CLS
      state; the input of :meth:`DualCLSTextEncoder.fuse`;
    - ``attention_mask``: (N, L), 1 on tokens, 0 on padding, as given.
    """

    embeds: torch.Tensor
    hidden: torch.Tensor
    attention_mask: torch.Tensor


def _bert_config(config: dict[str, Any]) -> Any:
    from transformers import BertConfig

    try:
        bert = BertConfig(**config)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"not a BertConfig: {e}") from e
    if bert.hidden_size % bert.num_attention_heads:
        raise ConfigError(f"hidden_size {bert.hidden_size} is not a multiple of num_attention_heads "
                          f"{bert.num_attention_heads}")
    if bert.is_decoder or bert.add_cross_attention:
        raise ConfigError("is_decoder / add_cross_attention must be false: the text layers are bidirectional, "
                          "and the fusion layers' cross-attention is the encoder's own (num_fusion_layers)")
    return bert


def _check_split(layers: int, num_fusion_layers: int, positions: int, max_tokens: int) -> None:
    if isinstance(num_fusion_layers, bool) or not isinstance(num_fusion_layers, int) \
            or not 0 <= num_fusion_layers < layers:
        raise ConfigError(f"num_fusion_layers must be an int in 0..{layers - 1} (BERT has {layers} layers and "
                          f"the text embedding needs at least one), found {num_fusion_layers!r}")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 2 <= max_tokens <= positions:
        raise ConfigError(f"max_tokens must be an int in 2..{positions} (the encoder's positions), "
                          f"found {max_tokens!r}")


def _additive_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(N, L) of 1/0 -> (N, 1, 1, L): 0 where attended, the dtype's minimum on padding (BERT's
    extended mask; eager and SDPA attention of transformers 4 and 5 both add it to the scores)."""
    return (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


def _layer_states(output: Any) -> torch.Tensor:
    # a BertLayer returns its states (transformers 5) or a tuple that starts with them (4.x)
    return output[0] if isinstance(output, tuple) else output


@MODELS.register
class DualCLSTextEncoder(nn.Module):
    """BERT with one learnable CLS token per caption view: (texts, view) -> L2-normalised embeddings.

    Expects ``input_ids`` / ``attention_mask`` (N, L) from a BERT tokenizer (``[CLS]`` first)
    and ``view_ids`` (N,): each row's view, an index into :data:`VIEWS` (0 summary, 1
    detailed). The view's CLS embedding replaces the ``[CLS]`` token's input embedding at
    position 0; the text layers encode the sequence, and
    ``normalize(text_proj(hidden[:, 0]))`` is the embedding. Summary and detailed captions
    of one video thus get separate representations that are aligned to the video
    independently, while every other weight is shared.

    Reference: the multi-view-captions paper (MVC, sec. 3.2, "granularity-aware text
    representation"; Table 6 compares single and dual CLS); the BERT split follows UMT
    (Li et al., Unmasked Teacher, ICCV 2023): BERT-base keeps 9 text layers and 3 fusion
    layers (``num_fusion_layers=3``), BERT-large 19 + 5 (``num_fusion_layers=5``).
    Captions are truncated at 128 tokens (``max_tokens``), as in the paper.

    - **CLS initialisation.** Every view's CLS starts as a copy of BERT's ``[CLS]`` word
      embedding (``cls_token_id``, read from the tokenizer when not given): the second
      (detailed) CLS begins where the first does, and the two diverge in training. So at
      initialisation both views embed a text exactly as plain BERT's ``[CLS]`` would.
    - **Single CLS** (``dual_cls=False``, Table 6's baseline): one CLS serves every view;
      ``view_ids`` are accepted and ignored, so the same training code runs both variants.
    - **Fusion layers.** The last ``num_fusion_layers`` BERT layers are not used for the
      embedding; :meth:`fuse` runs them with a :class:`VideoCrossAttention` between
      self-attention and feed-forward (UMT's ``mode="fusion"``), for VTM and MLM.
      :meth:`mlm_logits` is BERT's MLM head (``BertOnlyMLMHead``), tied to the word
      embeddings.

    Interface for losses (VTC / VTM / MLM)::

        out = enc.encode(input_ids, attention_mask, view_ids)   # DualCLSTextOutput
        out.embeds                                              # (N, embed_dim), unit norm: VTC
        fused = enc.fuse(out.hidden, attention_mask, video_tokens, video_mask)  # (N, L, H)
        fused[:, 0]                                             # VTM: the CLS state, to a 2-way head
        enc.mlm_logits(fused)                                   # MLM: (N, L, vocab_size)

    ``forward(input_ids, attention_mask, view_ids=None)`` returns ``out.embeds`` (every row
    a summary caption when ``view_ids`` is ``None``), so evaluation code that calls
    ``encoder(ids, mask)`` works unchanged.

    Built either from a pretrained BERT (``pretrained="bert-base-uncased"`` or a local
    folder; its MLM head too, as ``BertForMaskedLM`` holds it) or from a config for a
    random-init model (``config={...BertConfig kwargs}``). ``tokenizer`` names where its
    tokenizer lives (defaults to ``pretrained``); ``video_width`` is the width of the
    video tokens :meth:`fuse` reads (default: BERT's ``hidden_size``). The cross-attention
    and ``text_proj`` are new (random) weights either way.

    Example::

        enc = DualCLSTextEncoder(config=dict(vocab_size=100, hidden_size=32, num_hidden_layers=3,
                                             num_attention_heads=2, intermediate_size=64),
                                 embed_dim=16, num_fusion_layers=1, cls_token_id=2)
        ids = torch.randint(5, 100, (2, 7)); ids[:, 0] = 2
        emb = enc(ids, torch.ones_like(ids), torch.tensor([0, 1]))  # (2, 16): a summary, a detailed caption
    """

    def __init__(
        self,
        pretrained: str | None = None,
        config: dict[str, Any] | None = None,
        embed_dim: int = 256,
        num_fusion_layers: int = 3,
        video_width: int | None = None,
        dual_cls: bool = True,
        max_tokens: int = 128,
        tokenizer: str | None = None,
        cls_token_id: int | None = None,
        revision: str | None = None,
    ) -> None:
        super().__init__()
        from transformers import BertForMaskedLM

        if (pretrained is None) == (config is None):
            raise ValueError("DualCLSTextEncoder needs exactly one of pretrained= or config=")
        if pretrained is not None:
            check_local_folder(pretrained, "model.pretrained")
            with loading_pretrained(pretrained, "model.pretrained"):
                full = BertForMaskedLM.from_pretrained(pretrained, revision=revision)
            _bert_config(full.config.to_dict())
        else:
            full = BertForMaskedLM(_bert_config(config))
        bert_config = full.config
        _check_split(bert_config.num_hidden_layers, num_fusion_layers, bert_config.max_position_embeddings,
                     max_tokens)
        self.pretrained = pretrained
        self.tokenizer_path = tokenizer or pretrained
        self._tokenizer = None
        if cls_token_id is None:
            if self.tokenizer_path is None:
                raise ValueError("DualCLSTextEncoder needs cls_token_id= or tokenizer= (whose [CLS] starts "
                                 "every view's CLS embedding)")
            cls_token_id = self.load_tokenizer().cls_token_id
        if not 0 <= cls_token_id < bert_config.vocab_size:
            raise ConfigError(f"cls_token_id {cls_token_id} is outside the vocabulary "
                              f"(vocab_size {bert_config.vocab_size})")

        self.bert = full.bert
        self.mlm_head = full.cls
        self.tie_mlm_head()
        del full
        hidden = bert_config.hidden_size
        self.crossattention = nn.ModuleList(
            VideoCrossAttention(hidden, video_width or hidden, bert_config.num_attention_heads,
                                attention_dropout=bert_config.attention_probs_dropout_prob,
                                hidden_dropout=bert_config.hidden_dropout_prob,
                                layer_norm_eps=bert_config.layer_norm_eps,
                                initializer_range=bert_config.initializer_range)
            for _ in range(num_fusion_layers))
        cls = self.bert.embeddings.word_embeddings.weight.detach()[cls_token_id]
        self.cls_embeddings = nn.Parameter(cls.repeat(len(VIEWS) if dual_cls else 1, 1).clone())
        self.text_proj = nn.Linear(hidden, embed_dim)
        self.dual_cls = bool(dual_cls)
        self.max_tokens = max_tokens
        self.cls_token_id = cls_token_id

    @classmethod
    def describe(
        cls,
        pretrained: str | None = None,
        config: dict[str, Any] | None = None,
        embed_dim: int = 256,
        num_fusion_layers: int = 3,
        video_width: int | None = None,
        dual_cls: bool = True,
        max_tokens: int = 128,
        tokenizer: str | None = None,
        cls_token_id: int | None = None,
        revision: str | None = None,
        *,
        setting: str = "model.pretrained",
    ) -> TextEncoderShape:
        """The :class:`~vlr_plugins.text.blip_text_encoder.TextEncoderShape` these arguments
        build, reading only BERT's ``config.json`` (a pretrained model: cached, local or
        downloaded; no weights) or the given ``config``; for checks before training.

        Raises :class:`~vlr_plugins.errors.ModelLoadError` naming ``setting`` when the
        pretrained config cannot be had, :class:`~vlr_plugins.errors.ConfigError` for a
        config, split or ``max_tokens`` no encoder is built from.
        """
        from transformers import BertConfig

        if (pretrained is None) == (config is None):
            raise ValueError("DualCLSTextEncoder needs exactly one of pretrained= or config=")
        if pretrained is not None:
            check_local_folder(pretrained, setting)
            if os.path.isdir(pretrained) and not os.path.isfile(os.path.join(pretrained, "config.json")):
                raise ModelLoadError(f"{setting}: {pretrained} holds no config.json (save a model there with "
                                     f"save_pretrained, or name a Hub id); see {OFFLINE_DOC}")
            with loading_pretrained(pretrained, setting):
                bert = _bert_config(BertConfig.from_pretrained(pretrained, revision=revision).to_dict())
        else:
            bert = _bert_config(config)
        _check_split(bert.num_hidden_layers, num_fusion_layers, bert.max_position_embeddings, max_tokens)
        return TextEncoderShape(bert.max_position_embeddings, embed_dim, bert.vocab_size)

    @property
    def embed_dim(self) -> int:
        return self.text_proj.out_features

    @property
    def views(self) -> tuple[str, ...]:
        """The view names, in ``view_ids`` order (:data:`VIEWS`)."""
        return VIEWS

    @property
    def max_positions(self) -> int:
        return self.bert.config.max_position_embeddings

    @property
    def num_fusion_layers(self) -> int:
        return len(self.crossattention)

    @property
    def num_text_layers(self) -> int:
        return self.bert.config.num_hidden_layers - self.num_fusion_layers

    @property
    def video_width(self) -> int:
        return self.crossattention[0].video_width if len(self.crossattention) else self.bert.config.hidden_size

    def tie_mlm_head(self) -> None:
        """Make the MLM decoder share the word embeddings (and its bias the head's), as BERT's
        ``BertForMaskedLM`` does; called at construction."""
        predictions = self.mlm_head.predictions
        predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight
        predictions.decoder.bias = predictions.bias

    def to_config(self) -> dict[str, Any]:
        """A registry config that rebuilds this architecture without downloading weights.

        Plain JSON types only, so it can ride in a weights-only checkpoint; load the
        state dict into ``MODELS.build(enc.to_config())`` to restore the encoder.
        """
        return {
            "type": type(self).__name__,
            "config": json.loads(self.bert.config.to_json_string(use_diff=False)),
            "embed_dim": self.embed_dim,
            "num_fusion_layers": self.num_fusion_layers,
            "video_width": self.video_width,
            "dual_cls": self.dual_cls,
            "max_tokens": self.max_tokens,
            "tokenizer": self.tokenizer_path,
            "cls_token_id": self.cls_token_id,
        }

    def load_tokenizer(self):
        """The tokenizer this encoder was trained with (``AutoTokenizer``; local files first), loaded once."""
        if self._tokenizer is None:
            if self.tokenizer_path is None:
                raise ValueError("this DualCLSTextEncoder was built from a config without tokenizer=")
            self._tokenizer = load_tokenizer(self.tokenizer_path, "model.tokenizer")
        return self._tokenizer

    @staticmethod
    def view_index(view: str) -> int:
        """The ``view_ids`` value of ``view`` (a name in :data:`VIEWS`)."""
        if view not in VIEWS:
            raise ValueError(f"unknown view {view!r}; the views are {', '.join(VIEWS)}")
        return VIEWS.index(view)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               view_ids: torch.Tensor | None = None) -> DualCLSTextOutput:
        """input_ids, attention_mask: (N, L); view_ids: (N,) indices into :data:`VIEWS`, or
        ``None`` for all summary -> :class:`DualCLSTextOutput` (embedding and text-layer states)."""
        n, length = input_ids.shape
        if length > self.max_positions:
            raise ValueError(f"texts of {length} tokens exceed the encoder's {self.max_positions} positions")
        if view_ids is None:
            view_ids = torch.zeros(n, dtype=torch.long, device=input_ids.device)
        if view_ids.shape != (n,) or view_ids.dtype not in (torch.int32, torch.int64) \
                or (n and not 0 <= int(view_ids.min()) <= int(view_ids.max()) < len(VIEWS)):
            raise ValueError(f"view_ids must be ({n},) integers in 0..{len(VIEWS) - 1} (indices into {VIEWS}), "
                             f"found {view_ids.dtype} of shape {tuple(view_ids.shape)}")
        rows = view_ids.long() if self.dual_cls else torch.zeros_like(view_ids, dtype=torch.long)
        words = self.bert.embeddings.word_embeddings(input_ids)
        embeds = torch.cat([self.cls_embeddings[rows][:, None, :].to(words.dtype), words[:, 1:]], dim=1)
        hidden = self.bert.embeddings(inputs_embeds=embeds)
        mask = _additive_mask(attention_mask, hidden.dtype)
        for layer in self.bert.encoder.layer[:self.num_text_layers]:
            hidden = _layer_states(layer(hidden, mask))
        text_embeds = F.normalize(self.text_proj(hidden[:, 0, :]), dim=-1)
        return DualCLSTextOutput(embeds=text_embeds, hidden=hidden, attention_mask=attention_mask)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                view_ids: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids, attention_mask: (N, L); view_ids: (N,) or None (all summary) -> (N, embed_dim), unit norm."""
        return self.encode(input_ids, attention_mask, view_ids).embeds

    def encode_text(self, texts: Sequence[str] | str, view: str = "summary") -> torch.Tensor:
        """Texts of one ``view`` -> (N, embed_dim), unit norm; tokenized with the encoder's
        tokenizer, truncated at ``max_tokens``, on the encoder's device. Gradients flow as in
        ``forward``: wrap it in ``torch.no_grad()`` for inference."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        index = self.view_index(view)
        batch = self.load_tokenizer()(texts, truncation=True, max_length=self.max_tokens, padding=True,
                                      return_tensors="pt")
        device = self.text_proj.weight.device
        ids = batch["input_ids"].to(device)
        return self(ids, batch["attention_mask"].to(device), torch.full((len(texts),), index, device=device))

    def fuse(self, text_hidden: torch.Tensor, text_mask: torch.Tensor, video_tokens: torch.Tensor,
             video_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Run the fusion layers: each is self-attention over the text, :class:`VideoCrossAttention`
        to the video, then feed-forward (UMT's ``mode="fusion"``).

        text_hidden: (N, L, hidden_size), :attr:`DualCLSTextOutput.hidden`; text_mask: (N, L),
        1 on tokens; video_tokens: (N, T, video_width); video_mask: (N, T), 1 on tokens to
        attend, or ``None`` for all -> (N, L, hidden_size). ``[:, 0]`` is the VTM input; the
        whole is the MLM input of :meth:`mlm_logits`. With ``num_fusion_layers=0`` it raises.
        """
        if not self.num_fusion_layers:
            raise ValueError("this DualCLSTextEncoder has no fusion layers (num_fusion_layers=0)")
        if text_hidden.shape[:2] != text_mask.shape:
            raise ValueError(f"text_mask must be (N, L) = {tuple(text_hidden.shape[:2])}, "
                             f"found {tuple(text_mask.shape)}")
        mask = _additive_mask(text_mask, text_hidden.dtype)
        hidden = text_hidden
        for layer, cross in zip(self.bert.encoder.layer[self.num_text_layers:], self.crossattention):
            attended = layer.attention(hidden, mask)[0]
            attended = cross(attended, video_tokens.to(attended.dtype), video_mask)
            hidden = layer.output(layer.intermediate(attended), attended)
        return hidden

    def mlm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: (N, L, hidden_size), the output of :meth:`fuse` -> (N, L, vocab_size): BERT's
        MLM head, its decoder tied to the word embeddings."""
        return self.mlm_head(hidden)
