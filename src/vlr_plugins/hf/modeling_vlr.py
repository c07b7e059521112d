"""Transformers models of the vlr retrieval family: texts -> unit-norm embeddings in an image space.

Every member computes ``normalize(project(pool(encode(input_ids))))``;
:class:`VlrRetrievalPreTrainedModel` owns that pipeline and the public methods
(``forward``, ``encode_text``, ``get_text_features``), and a member supplies the three
steps for its backbone. :class:`VlrTextEncoderModel` is BLIP's text encoder + ``text_proj``
(pool = the ``[CLS]`` state), the text side the paragraph recipes train, with the frozen
image side (BLIP's ViT + ``vision_proj``) its texts were aligned to: ``get_image_features``.

This file is copied beside exported weights (``register_for_auto_class``) and imported
where vlr-plugins is not installed: it imports only ``torch``, ``transformers`` and
``.configuration_vlr``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import BlipTextModel, BlipVisionModel, PreTrainedModel
from transformers.utils import ModelOutput

from .configuration_vlr import VlrRetrievalConfig, VlrTextEncoderConfig

__all__ = ["VlrRetrievalPreTrainedModel", "VlrTextEncoderModel", "VlrTextEncoderOutput"]


@dataclass
class VlrTextEncoderOutput(ModelOutput):
    """``text_embeds``: (N, embed_dim), unit norm; ``last_hidden_state``: (N, L, hidden) of the backbone."""

    text_embeds: torch.FloatTensor | None = None
    last_hidden_state: torch.FloatTensor | None = None


class VlrRetrievalPreTrainedModel(PreTrainedModel):
    """Base of the family: one forward for every member, three steps each member fills in.

    - ``_encode(input_ids, attention_mask)`` -> (N, L, H) hidden states of the backbone;
    - ``_pool(hidden, attention_mask)`` -> (N, H) one vector per text (``[CLS]``, last token, ...);
    - ``_project(pooled)`` -> (N, embed_dim), before normalisation.

    ``vlr_encoder_type`` names the vlr-plugins text encoder (its ``MODELS`` registry
    name) that a member exports, so ``vlr_plugins.hf.export_text_encoder`` finds it;
    ``vlr_image_space_from_pretrained`` says whether that encoder's ``pretrained`` model
    also names the image-embedding space its texts were aligned to (BLIP's does; a BERT
    does not), which the export then records.
    """

    config_class = VlrRetrievalConfig
    base_model_prefix = "vlr"
    main_input_name = "input_ids"
    vlr_encoder_type = None
    vlr_image_space_from_pretrained = False

    def _encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement _encode")

    def _pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement _pool")

    def _project(self, pooled: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement _project")

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        return_dict: bool | None = None,
        **kwargs: Any,
    ) -> VlrTextEncoderOutput | tuple:
        """input_ids, attention_mask: (N, L) -> ``text_embeds`` (N, embed_dim), unit norm.

        ``token_type_ids`` (which BERT tokenizers return) is accepted and ignored: every
        text is a single segment.
        """
        if kwargs:
            raise TypeError(f"{type(self).__name__}.forward got unexpected arguments: {', '.join(sorted(kwargs))}")
        positions = self.config.max_positions
        if positions is not None and input_ids.shape[1] > positions:
            raise ValueError(f"texts of {input_ids.shape[1]} tokens exceed the text encoder's {positions} "
                             "positions; tokenize with truncation=True, max_length=config.max_tokens_for(view)")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self._encode(input_ids, attention_mask)
        embeds = F.normalize(self._project(self._pool(hidden, attention_mask)), dim=-1)
        out = VlrTextEncoderOutput(text_embeds=embeds, last_hidden_state=hidden)
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        return out if return_dict else out.to_tuple()

    def encode_text(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                    **kwargs: Any) -> torch.Tensor:
        """input_ids, attention_mask: (N, L) -> (N, embed_dim), unit norm: the retrieval embedding."""
        return self.forward(input_ids, attention_mask, return_dict=True, **kwargs).text_embeds

    def get_text_features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                          **kwargs: Any) -> torch.Tensor:
        """Same as :meth:`encode_text`, under the name CLIP-style code calls.

        Returns a tensor (N, embed_dim), already unit norm: the space was trained with
        cosine similarity, so normalising again is harmless. (transformers 5's
        ``CLIPModel.get_text_features`` returns an output object with unnormalised
        ``pooler_output`` instead.)
        """
        return self.encode_text(input_ids, attention_mask, **kwargs)


class VlrTextEncoderModel(VlrRetrievalPreTrainedModel):
    """BLIP text encoder + ``text_proj``: texts -> normalize(text_proj(hidden[:, 0])); and, when
    ``config.vision_config`` is set, BLIP's ViT + ``vision_proj``: images ->
    normalize(vision_proj(ViT(pixel_values)[:, 0])).

    Exactly ``BlipForImageTextRetrieval(use_itm_head=False)``'s two sides and vlr-plugins'
    ``BlipTextEncoder`` / ``BlipImageEncoder`` (the image embeddings ``vlr precompute``
    stores); the text encoder keeps BLIP's cross-attention weights (unused here, frozen)
    so trained state dicts map 1:1.

    Example::

        >>> model = AutoModel.from_pretrained(folder, trust_remote_code=True)  # doctest: +SKIP
        >>> tok = AutoTokenizer.from_pretrained(folder)  # doctest: +SKIP
        >>> batch = tok(texts, truncation=True, max_length=model.config.max_tokens_for("paragraph"),
        ...             padding=True, return_tensors="pt")  # doctest: +SKIP
        >>> emb = model.encode_text(**batch)  # (N, embed_dim), unit norm  # doctest: +SKIP
        >>> pixels = AutoImageProcessor.from_pretrained(folder)(images, return_tensors="pt")  # doctest: +SKIP
        >>> image_emb = model.get_image_features(**pixels)  # (M, embed_dim), unit norm  # doctest: +SKIP
    """

    config_class = VlrTextEncoderConfig
    vlr_encoder_type = "BlipTextEncoder"
    vlr_image_space_from_pretrained = True
    _no_split_modules = ["BlipTextLayer", "BlipEncoderLayer"]

    def __init__(self, config: VlrTextEncoderConfig) -> None:
        super().__init__(config)
        self.text_encoder = BlipTextModel(config.text_config, add_pooling_layer=False)
        self.text_proj = nn.Linear(config.text_config.hidden_size, config.embed_dim)
        if config.vision_config is not None:
            self.vision_model = BlipVisionModel(config.vision_config)
            self.vision_proj = nn.Linear(config.vision_config.hidden_size, config.embed_dim)
        self._freeze_cross_attention()
        self.post_init()

    def get_image_features(self, pixel_values: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """pixel_values: (N, 3, H, W), as the folder's image processor makes them -> (N, embed_dim),
        unit norm: BLIP's image embedding, equal to the rows ``vlr precompute`` wrote for the
        training store.

        Raises ``ValueError`` for a text-only model (``config.vision_config`` is ``None``).
        """
        if kwargs:
            raise TypeError(f"get_image_features got unexpected arguments: {', '.join(sorted(kwargs))}")
        if self.config.vision_config is None:
            space = self.config.image_embedding_space
            raise ValueError("this model is its text side only: the image embeddings it was trained against "
                             f"came from {space.get('encoder') or space.get('model') or 'an encoder not recorded'}, "
                             "which the export could not bundle; embed images with that encoder")
        pixel_values = pixel_values.to(dtype=self.vision_proj.weight.dtype)
        hidden = self.vision_model(pixel_values=pixel_values, return_dict=True).last_hidden_state
        return F.normalize(self.vision_proj(hidden[:, 0, :]), dim=-1)

    def _freeze_cross_attention(self) -> None:
        # as in BlipTextEncoder: contrastive training never reaches the cross-attention,
        # and trainable parameters without gradients break DistributedDataParallel
        for name, param in self.text_encoder.named_parameters():
            if "crossattention" in name:
                param.requires_grad_(False)

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any):
        loaded = super().from_pretrained(*args, **kwargs)
        # loading replaces the parameters built in __init__, and with them their requires_grad
        (loaded[0] if isinstance(loaded, tuple) else loaded)._freeze_cross_attention()
        return loaded

    def get_input_embeddings(self) -> nn.Module:
        return self.text_encoder.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.text_encoder.set_input_embeddings(value)

    def _encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.text_encoder(input_ids=input_ids, attention_mask=attention_mask,
                                 return_dict=True).last_hidden_state

    def _pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return hidden[:, 0, :]

    def _project(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.text_proj(pooled)

    @classmethod
    def from_vlr_encoder(cls, encoder: nn.Module, *, image_side: nn.Module | None = None,
                         **config_fields: Any) -> VlrTextEncoderModel:
        """This model with the weights of vlr-plugins' ``BlipTextEncoder`` ``encoder``, copied exactly.

        ``encoder`` needs ``text_encoder`` (a ``BlipTextModel`` without pooler) and
        ``text_proj`` (``nn.Linear``); ``image_side``, when given, needs ``vision_model`` (a
        ``BlipVisionModel``) and ``vision_proj`` (``nn.Linear`` into the text side's space),
        as ``BlipForImageTextRetrieval`` and vlr-plugins' ``BlipImageEncoder`` have them;
        ``config_fields`` are the shared fields of :class:`VlrRetrievalConfig`
        (``token_budgets``, ``image_embedding_space``, ...). The result is in eval mode, in
        the encoder's dtype.
        """
        for taken in ("text_config", "vision_config", "embed_dim"):
            if taken in config_fields:
                raise TypeError(f"{taken} comes from the encoder; do not pass it to from_vlr_encoder")
        text_encoder, text_proj = getattr(encoder, "text_encoder", None), getattr(encoder, "text_proj", None)
        if not isinstance(text_encoder, BlipTextModel) or not isinstance(text_proj, nn.Linear):
            raise TypeError(f"expected a BlipTextEncoder (text_encoder: BlipTextModel, text_proj: nn.Linear), "
                            f"found {type(encoder).__name__} with text_encoder={type(text_encoder).__name__}, "
                            f"text_proj={type(text_proj).__name__}")
        text_config = {k: v for k, v in text_encoder.config.to_dict().items()
                       if k not in ("transformers_version", "_name_or_path", "architectures", "dtype")}
        vision_config, vision_state = None, {}
        if image_side is not None:
            vision_model, vision_proj = getattr(image_side, "vision_model", None), getattr(image_side, "vision_proj", None)
            if not isinstance(vision_model, BlipVisionModel) or not isinstance(vision_proj, nn.Linear):
                raise TypeError(f"expected BLIP's image side (vision_model: BlipVisionModel, vision_proj: nn.Linear), "
                                f"found {type(image_side).__name__} with vision_model={type(vision_model).__name__}, "
                                f"vision_proj={type(vision_proj).__name__}")
            if vision_proj.out_features != text_proj.out_features:
                raise ValueError(f"the image side embeds into {vision_proj.out_features} dimensions, the text side "
                                 f"into {text_proj.out_features}: they are not one embedding space")
            vision_config = {k: v for k, v in vision_model.config.to_dict().items()
                             if k not in ("transformers_version", "_name_or_path", "architectures", "dtype")}
            vision_state = {f"vision_model.{k}": v for k, v in vision_model.state_dict().items()}
            vision_state.update({f"vision_proj.{k}": v for k, v in vision_proj.state_dict().items()})
        config = cls.config_class(text_config=text_config, vision_config=vision_config,
                                  embed_dim=text_proj.out_features, **config_fields)
        model = cls(config).to(dtype=text_proj.weight.dtype)
        state = {f"text_encoder.{k}": v for k, v in text_encoder.state_dict().items()}
        state.update({f"text_proj.{k}": v for k, v in text_proj.state_dict().items()})
        state.update({k: v.to(text_proj.weight.dtype) for k, v in vision_state.items()})
        result = model.load_state_dict(state, strict=False)
        if result.missing_keys or result.unexpected_keys:
            raise ValueError(f"{type(encoder).__name__} does not match {cls.__name__}: missing "
                             f"{result.missing_keys[:5]}, unexpected {result.unexpected_keys[:5]}")
        return model.eval()
