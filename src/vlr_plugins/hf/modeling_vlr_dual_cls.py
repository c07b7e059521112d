"""The dual-CLS member of the vlr retrieval family: MVC's granularity-aware BERT text encoder.

Texts of a caption view (``summary``, ``detailed``) -> ``normalize(text_proj(state of the
view's CLS))``, the CLS embedding replacing ``[CLS]``'s at position 0 and only the text
layers run; the fusion layers (cross-attention to video tokens) and the MLM head come
along for video-text matching and masked language modelling. Weights map 1:1 to
vlr-plugins' ``DualCLSTextEncoder``. An MVC export also holds the video tower trained with
it (``config.video_config``, ``video_model``: :mod:`.modeling_vlr_video`), so
``get_video_features`` embeds clips into the texts' space.

This file is copied beside exported weights (``register_for_auto_class``) and imported
where vlr-plugins is not installed: it imports only ``torch``, ``transformers`` and the
family's own files.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertModel
from transformers.models.bert.modeling_bert import BertOnlyMLMHead

from .configuration_vlr_dual_cls import VlrDualCLSTextEncoderConfig
from .configuration_vlr_video import video_config_of
from .modeling_vlr import VlrRetrievalPreTrainedModel, VlrTextEncoderOutput
from .modeling_vlr_video import VlrSpaceTimeViT

try:  # transformers 5 loads into empty tensors and re-initialises what the weights do not hold
    from transformers.initialization import copy_ as _init_copy
except ImportError:  # transformers 4
    def _init_copy(tensor: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return tensor.copy_(value)

__all__ = ["VlrDualCLSTextEncoderModel"]


class _VideoCrossAttention(nn.Module):
    # vlr-plugins' VideoCrossAttention, restated here because this file may not import it:
    # LayerNorm(text + dropout(dense(attention of text over video tokens)))
    def __init__(self, hidden_size: int, video_width: int, num_heads: int, attention_dropout: float,
                 hidden_dropout: float, layer_norm_eps: float) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(video_width, hidden_size)
        self.value = nn.Linear(video_width, hidden_size)
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.attention_dropout = attention_dropout
        self.dropout = nn.Dropout(hidden_dropout)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        n, length, width = x.shape
        return x.view(n, length, self.num_heads, width // self.num_heads).transpose(1, 2)

    def forward(self, text: torch.Tensor, video: torch.Tensor, video_mask: torch.Tensor | None) -> torch.Tensor:
        if video.dim() != 3 or video.shape[-1] != self.key.in_features or video.shape[0] != text.shape[0]:
            raise ValueError(f"video tokens must be (N={text.shape[0]}, T, {self.key.in_features}), "
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


def _additive_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


class VlrDualCLSTextEncoderModel(VlrRetrievalPreTrainedModel):
    """BERT + one learnable CLS per caption view + ``text_proj``: (texts, view) -> unit-norm embeddings.

    ``forward`` / ``encode_text`` / ``get_text_features`` take ``view=`` (a name of
    ``config.views``; default ``config.default_view``) or ``view_ids=`` (N,) for a batch
    that mixes views. With ``config.dual_cls`` false every view shares one CLS.
    ``fuse(text_hidden, text_mask, video_tokens, video_mask)`` runs the fusion layers
    and ``mlm_logits(hidden)`` the tied MLM head, as vlr-plugins' ``DualCLSTextEncoder``.

    With ``config.video_config`` (an MVC export) the trained video tower comes along as
    ``video_model``: ``get_video_features(pixel_values_videos)`` -> (B, embed_dim), the rows
    ``vlr precompute --encoder vlr:CHECKPOINT`` writes; the folder's ``VlrVideoProcessor``
    (``AutoVideoProcessor``) makes ``pixel_values_videos`` from raw frames.

    Example::

        >>> model = AutoModel.from_pretrained(folder, trust_remote_code=True)  # doctest: +SKIP
        >>> tok = AutoTokenizer.from_pretrained(folder)  # doctest: +SKIP
        >>> batch = tok(texts, truncation=True, max_length=model.config.max_tokens_for(), padding=True,
        ...             return_tensors="pt")  # doctest: +SKIP
        >>> emb = model.encode_text(**batch, view="detailed")  # (N, embed_dim), unit norm  # doctest: +SKIP
        >>> processor = AutoVideoProcessor.from_pretrained(folder, trust_remote_code=True)  # doctest: +SKIP
        >>> clips = processor(videos=[frames], return_tensors="pt")  # frames: (T, H, W, 3) uint8  # doctest: +SKIP
        >>> scores = emb @ model.get_video_features(**clips).T  # doctest: +SKIP
    """

    config_class = VlrDualCLSTextEncoderConfig
    vlr_encoder_type = "DualCLSTextEncoder"
    _no_split_modules = ["BertLayer"]
    _tied_weights_keys = {
        "mlm_head.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "mlm_head.predictions.decoder.bias": "mlm_head.predictions.bias",
    }

    def __init__(self, config: VlrDualCLSTextEncoderConfig) -> None:
        super().__init__(config)
        bert = config.text_config
        self.bert = BertModel(bert, add_pooling_layer=False)
        self.mlm_head = BertOnlyMLMHead(bert)
        self.crossattention = nn.ModuleList(
            _VideoCrossAttention(bert.hidden_size, config.video_width, bert.num_attention_heads,
                                 bert.attention_probs_dropout_prob, bert.hidden_dropout_prob, bert.layer_norm_eps)
            for _ in range(config.num_fusion_layers))
        self.cls_embeddings = nn.Parameter(torch.zeros(len(config.views) if config.dual_cls else 1,
                                                       bert.hidden_size))
        self.text_proj = nn.Linear(bert.hidden_size, config.embed_dim)
        self.video_model = VlrSpaceTimeViT(config.video_config) if config.video_config is not None else None
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, VlrSpaceTimeViT) and module.pos_embed_kind == "sincos":
            # fixed tables, not weights: a loaded model rebuilds them from the config
            video, image = module.position_tables()
            _init_copy(module.pos_video, video)
            _init_copy(module.pos_image, image)

    def _video(self) -> VlrSpaceTimeViT:
        if self.video_model is None:
            raise ValueError("this model has no video tower (config.video_config is None): it was exported from a "
                             "text encoder alone")
        return self.video_model

    def get_video_features(self, pixel_values_videos: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """pixel_values_videos (B, num_frames, 3, S, S), sampled and normalised by the folder's video
        processor -> (B, embed_dim) in the texts' space (unit norm when ``video_config['normalize']``)."""
        if kwargs:
            raise TypeError(f"get_video_features got unexpected arguments: {', '.join(sorted(kwargs))}")
        tower = self._video()
        return tower(pixel_values_videos.to(tower.patch_embed.weight.dtype))[0]

    def encode_video(self, pixel_values_videos: torch.Tensor) -> torch.Tensor:
        """Same as :meth:`get_video_features`."""
        return self.get_video_features(pixel_values_videos)

    def video_tokens(self, pixel_values_videos: torch.Tensor) -> torch.Tensor:
        """(B, num_frames, 3, S, S) -> the tower's output tokens (B, N, video_width), what :meth:`fuse` attends to."""
        tower = self._video()
        return tower(pixel_values_videos.to(tower.patch_embed.weight.dtype))[1]

    def get_input_embeddings(self) -> nn.Module:
        return self.bert.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.bert.set_input_embeddings(value)

    def get_output_embeddings(self) -> nn.Module:
        return self.mlm_head.predictions.decoder

    def _view_ids(self, n: int, device: torch.device, view: str | None,
                  view_ids: torch.Tensor | None) -> torch.Tensor:
        if view_ids is None:
            return torch.full((n,), self.config.view_index(view), dtype=torch.long, device=device)
        if view is not None:
            raise TypeError("give view= or view_ids=, not both")
        count = len(self.config.views)
        if view_ids.shape != (n,) or view_ids.dtype not in (torch.int32, torch.int64) \
                or (n and not 0 <= int(view_ids.min()) <= int(view_ids.max()) < count):
            raise ValueError(f"view_ids must be ({n},) integers in 0..{count - 1} (indices into "
                             f"{self.config.views}), found {view_ids.dtype} of shape {tuple(view_ids.shape)}")
        return view_ids.long()

    def _encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                view_ids: torch.Tensor | None = None) -> torch.Tensor:
        if view_ids is None:
            view_ids = self._view_ids(input_ids.shape[0], input_ids.device, None, None)
        rows = view_ids if self.config.dual_cls else torch.zeros_like(view_ids)
        words = self.bert.embeddings.word_embeddings(input_ids)
        embeds = torch.cat([self.cls_embeddings[rows][:, None, :].to(words.dtype), words[:, 1:]], dim=1)
        hidden = self.bert.embeddings(inputs_embeds=embeds)
        mask = _additive_mask(attention_mask, hidden.dtype)
        for layer in self.bert.encoder.layer[:self.config.num_text_layers]:
            out = layer(hidden, mask)
            hidden = out[0] if isinstance(out, tuple) else out  # a tuple under transformers 4
        return hidden

    def _pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return hidden[:, 0, :]

    def _project(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.text_proj(pooled)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        view: str | None = None,
        view_ids: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> VlrTextEncoderOutput | tuple:
        """input_ids, attention_mask: (N, L); ``view`` (one name for every row) or ``view_ids``
        (N,) -> ``text_embeds`` (N, embed_dim), unit norm; ``last_hidden_state``: the text
        layers' states (N, L, hidden), the input of :meth:`fuse`.

        ``token_type_ids`` (which BERT tokenizers return) is accepted and ignored: every
        text is a single segment.
        """
        if kwargs:
            raise TypeError(f"{type(self).__name__}.forward got unexpected arguments: {', '.join(sorted(kwargs))}")
        positions = self.config.max_positions
        if input_ids.shape[1] > positions:
            raise ValueError(f"texts of {input_ids.shape[1]} tokens exceed the text encoder's {positions} "
                             "positions; tokenize with truncation=True, max_length=config.max_tokens_for()")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        view_ids = self._view_ids(input_ids.shape[0], input_ids.device, view, view_ids)
        hidden = self._encode(input_ids, attention_mask, view_ids)
        embeds = F.normalize(self._project(self._pool(hidden, attention_mask)), dim=-1)
        out = VlrTextEncoderOutput(text_embeds=embeds, last_hidden_state=hidden)
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        return out if return_dict else out.to_tuple()

    def fuse(self, text_hidden: torch.Tensor, text_mask: torch.Tensor, video_tokens: torch.Tensor,
             video_mask: torch.Tensor | None = None) -> torch.Tensor:
        """text_hidden: (N, L, hidden) (``last_hidden_state``), text_mask: (N, L), video_tokens:
        (N, T, video_width), video_mask: (N, T) or None -> (N, L, hidden), through the fusion
        layers (self-attention, cross-attention to the video, feed-forward)."""
        if not self.config.num_fusion_layers:
            raise ValueError("this model has no fusion layers (num_fusion_layers=0)")
        if text_hidden.shape[:2] != text_mask.shape:
            raise ValueError(f"text_mask must be (N, L) = {tuple(text_hidden.shape[:2])}, "
                             f"found {tuple(text_mask.shape)}")
        mask = _additive_mask(text_mask, text_hidden.dtype)
        hidden = text_hidden
        for layer, cross in zip(self.bert.encoder.layer[self.config.num_text_layers:], self.crossattention):
            attended = layer.attention(hidden, mask)[0]
            attended = cross(attended, video_tokens.to(attended.dtype), video_mask)
            hidden = layer.output(layer.intermediate(attended), attended)
        return hidden

    def mlm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: (N, L, hidden), the output of :meth:`fuse` -> (N, L, vocab_size)."""
        return self.mlm_head(hidden)

    @classmethod
    def from_vlr_encoder(cls, encoder: nn.Module, video_tower: nn.Module | None = None,
                         **config_fields: Any) -> VlrDualCLSTextEncoderModel:
        """This model with the weights of vlr-plugins' ``DualCLSTextEncoder`` ``encoder``, copied exactly.

        ``video_tower``: the ``SpaceTimeViT`` trained with it (MVC), whose evaluated
        architecture becomes ``config.video_config`` and whose weights ``video_model``'s.

        ``config_fields`` are the shared fields of :class:`VlrRetrievalConfig`
        (``token_budgets``, ``image_embedding_space``, ...); ``default_max_tokens`` defaults
        to the encoder's truncation (``max_tokens``) when no budget is given. The result is
        in eval mode, in the encoder's dtype.
        """
        taken = ("text_config", "embed_dim", "num_fusion_layers", "video_width", "dual_cls", "views", "video_config")
        for key in taken:
            if key in config_fields:
                raise TypeError(f"{key} comes from the encoder; do not pass it to from_vlr_encoder")
        bert, text_proj = getattr(encoder, "bert", None), getattr(encoder, "text_proj", None)
        if not isinstance(bert, BertModel) or not isinstance(text_proj, nn.Linear) \
                or not hasattr(encoder, "crossattention") or not hasattr(encoder, "cls_embeddings"):
            raise TypeError(f"expected a DualCLSTextEncoder (bert: BertModel, text_proj: nn.Linear, crossattention, "
                            f"cls_embeddings), found {type(encoder).__name__}")
        if not config_fields.get("token_budgets") and config_fields.get("default_max_tokens") is None:
            config_fields["default_max_tokens"] = encoder.max_tokens
        text_config = {k: v for k, v in bert.config.to_dict().items()
                       if k not in ("transformers_version", "_name_or_path", "architectures", "dtype")}
        video_config = None if video_tower is None else video_config_of(video_tower)
        config = cls.config_class(text_config=text_config, embed_dim=text_proj.out_features,
                                  num_fusion_layers=len(encoder.crossattention), video_width=encoder.video_width,
                                  dual_cls=encoder.dual_cls, views=list(encoder.views), video_config=video_config,
                                  **config_fields)
        model = cls(config).to(dtype=text_proj.weight.dtype)
        state = dict(encoder.state_dict())
        if video_tower is not None:
            state.update({f"video_model.{k}": v for k, v in video_tower.state_dict().items()})
        result = model.load_state_dict(state, strict=False)
        missing = [k for k in result.missing_keys if not k.endswith(("position_ids", "token_type_ids"))]
        if missing or result.unexpected_keys:
            raise ValueError(f"{type(encoder).__name__} does not match {cls.__name__}: missing "
                             f"{missing[:5]}, unexpected {result.unexpected_keys[:5]}")
        return model.eval()

