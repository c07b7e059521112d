"""Configuration of the dual-CLS member of the vlr retrieval family (MVC's granularity-aware text encoder).

This file is copied beside exported weights (``register_for_auto_class``) and imported
where vlr-plugins is not installed, so it imports only ``transformers``,
``.configuration_vlr`` and ``.configuration_vlr_video``.
"""

from __future__ import annotations

from typing import Any

from transformers import BertConfig

from .configuration_vlr import VlrRetrievalConfig
from .configuration_vlr_video import check_video_config

__all__ = ["VlrDualCLSTextEncoderConfig"]


class VlrDualCLSTextEncoderConfig(VlrRetrievalConfig):
    """BERT with one learnable CLS token per caption view + ``text_proj``; its last
    ``num_fusion_layers`` layers, with cross-attention to video tokens, are kept for
    video-text matching and masked language modelling.

    Args:
        text_config: a ``BertConfig`` (or its dict), every layer included (text + fusion).
        num_fusion_layers: how many of BERT's last layers are fusion layers (not used for
            the embedding); UMT's split: 3 for BERT-base, 5 for BERT-large.
        video_width: width of the video tokens the fusion layers attend to (default: BERT's
            ``hidden_size``).
        dual_cls: one CLS per view (``True``) or one CLS for every view (the single-CLS baseline).
        views: the view names, in ``view_ids`` order.
        default_view: the view of a text when a caller names none.
        video_config: the trained video tower (``configuration_vlr_video``: its architecture,
            ``num_frames``, ``image_size``, ``image_mean`` / ``image_std``, ``frame_sampling``),
            or ``None`` for a text-only model. Its embeddings live in the texts' space
            (its ``embed_dim`` is the texts').
        **kwargs: the shared fields of :class:`VlrRetrievalConfig`.

    ``default_max_tokens`` falls back to BERT's positions when neither it nor a budget is given.
    """

    model_type = "vlr_dual_cls_text_encoder"
    # transformers 4.x reads ``sub_configs``; 5.x derives it from ``sub_configs_defaults``
    sub_configs = {"text_config": BertConfig}

    def __init__(
        self,
        text_config: dict[str, Any] | BertConfig | None = None,
        num_fusion_layers: int = 3,
        video_width: int | None = None,
        dual_cls: bool = True,
        views: list[str] | tuple[str, ...] = ("summary", "detailed"),
        default_view: str | None = None,
        video_config: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if text_config is None:
            text_config = BertConfig()
        elif isinstance(text_config, dict):
            fields = {k: v for k, v in text_config.items() if k not in ("model_type", "transformers_version")}
            text_config = BertConfig(**fields)
        elif not isinstance(text_config, BertConfig):
            raise TypeError(f"text_config must be a BertConfig or a dict, found {type(text_config).__name__}")
        layers = text_config.num_hidden_layers
        if isinstance(num_fusion_layers, bool) or not isinstance(num_fusion_layers, int) \
                or not 0 <= num_fusion_layers < layers:
            raise ValueError(f"num_fusion_layers must be an int in 0..{layers - 1}, found {num_fusion_layers!r}")
        video_width = text_config.hidden_size if video_width is None else video_width
        if isinstance(video_width, bool) or not isinstance(video_width, int) or video_width <= 0:
            raise ValueError(f"video_width must be a positive int, found {video_width!r}")
        views = list(views)
        if not views or len(set(views)) != len(views) or not all(isinstance(v, str) and v for v in views):
            raise ValueError(f"views must be distinct non-empty names, found {views!r}")
        default_view = views[0] if default_view is None else default_view
        if default_view not in views:
            raise ValueError(f"default_view {default_view!r} is not one of the views {views}")
        self.text_config = text_config
        self.num_fusion_layers = num_fusion_layers
        self.video_width = video_width
        self.dual_cls = bool(dual_cls)
        self.views = views
        self.default_view = default_view
        if video_config is not None:
            video_config = check_video_config(video_config)
        self.video_config = video_config
        # the MLM head's decoder is the word embeddings (transformers 5 ties by this flag)
        kwargs.setdefault("tie_word_embeddings", True)
        super().__init__(**kwargs)
        self._check_budgets_fit(self.max_positions)
        if video_config is not None:
            video_dim = video_config.get("embed_dim") or video_config["width"]
            if video_dim != self.embed_dim:
                raise ValueError(f"the video tower embeds in {video_dim} dims but the texts in {self.embed_dim} "
                                 "(embed_dim): they must share one space")
            if video_config["width"] != video_width:
                raise ValueError(f"the video tower's tokens are {video_config['width']} wide but the fusion layers "
                                 f"read {video_width}-wide tokens (video_width)")

    @property
    def max_positions(self) -> int:
        return self.text_config.max_position_embeddings

    @property
    def has_video_tower(self) -> bool:
        """Whether the model embeds videos itself (``get_video_features``)."""
        return self.video_config is not None

    @property
    def num_text_layers(self) -> int:
        """BERT layers that make the text embedding (the rest are fusion layers)."""
        return self.text_config.num_hidden_layers - self.num_fusion_layers

    def view_index(self, view: str | None = None) -> int:
        """The ``view_ids`` value of ``view`` (``default_view`` when ``None``)."""
        view = self.default_view if view is None else view
        if view not in self.views:
            raise ValueError(f"unknown view {view!r}; the views are {', '.join(self.views)}")
        return self.views.index(view)

    def to_diff_dict(self) -> dict[str, Any]:
        # the whole BERT config is written, not its difference from BertConfig's defaults,
        # so the saved architecture does not change when a transformers release changes them
        out = super().to_diff_dict()
        out["text_config"] = {k: v for k, v in self.text_config.to_dict().items()
                              if k not in ("transformers_version", "_name_or_path")}
        return out
