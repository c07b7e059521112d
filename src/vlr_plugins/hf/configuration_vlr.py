"""Configurations of the vlr retrieval family: everything a trained text encoder needs besides its weights.

``VlrRetrievalConfig`` holds what every member shares: the embedding size, the token
budgets it was trained with, the image-embedding space its texts were aligned to and
the recipe that trained it. Each member (a ``model_type``) adds its backbone's config;
``VlrTextEncoderConfig`` is BLIP's text encoder + ``text_proj``.

This file is copied beside exported weights (``register_for_auto_class``) and imported
where vlr-plugins is not installed, so it imports only ``transformers`` and the standard
library. Configs use an explicit ``__init__`` rather than dataclass fields so the same
file loads under transformers 4.x and 5.x.
"""

from __future__ import annotations

import copy
from typing import Any

from transformers import BlipTextConfig, BlipVisionConfig, PretrainedConfig

__all__ = ["VlrRetrievalConfig", "VlrTextEncoderConfig"]


def _check_positive_int(key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{key} must be a positive int, found {value!r}")


class VlrRetrievalConfig(PretrainedConfig):
    """Shared fields of every vlr retrieval encoder (not a model type of its own).

    Args:
        embed_dim: size of the (unit-norm) embeddings the model returns.
        token_budgets: text view -> tokenizer budget, special tokens included, as the
            recipe trained it (e.g. ``{"caption": 77, "paragraph": 128}``).
        default_max_tokens: the budget to use when a caller names none; defaults to the
            largest of ``token_budgets``.
        image_embedding_space: free-form description of the image embeddings the texts
            were aligned to, e.g. ``{"model": "Salesforce/blip-itm-base-coco",
            "projection": "vision_proj", "dim": 256, "normalized": True}``; a ``dim``
            must equal ``embed_dim``.
        recipe: name of the recipe that trained the model (``"C5"``), if any.
    """

    model_type = "vlr_retrieval"

    def __init__(
        self,
        embed_dim: int = 256,
        token_budgets: dict[str, int] | None = None,
        default_max_tokens: int | None = None,
        image_embedding_space: dict[str, Any] | None = None,
        recipe: str | None = None,
        **kwargs: Any,
    ) -> None:
        _check_positive_int("embed_dim", embed_dim)
        budgets = dict(token_budgets or {})
        for name, budget in budgets.items():
            _check_positive_int(f"token_budgets[{name!r}]", budget)
        if default_max_tokens is None and budgets:
            default_max_tokens = max(budgets.values())
        if default_max_tokens is not None:
            _check_positive_int("default_max_tokens", default_max_tokens)
        space = copy.deepcopy(dict(image_embedding_space or {}))
        if space.get("dim") is not None and space["dim"] != embed_dim:
            raise ValueError(f"image_embedding_space['dim'] must equal embed_dim ({embed_dim}): texts and images "
                             f"share one space, found {space['dim']}")
        self.embed_dim = embed_dim
        self.token_budgets = budgets
        self.default_max_tokens = default_max_tokens
        self.image_embedding_space = space
        self.recipe = recipe
        super().__init__(**kwargs)

    @property
    def max_positions(self) -> int | None:
        """The most tokens the backbone can read; ``None`` when unbounded. Members override it."""
        return None

    def max_tokens_for(self, view: str | None = None) -> int:
        """The tokenizer budget of ``view`` (a key of ``token_budgets``), or the default one.

        Example: ``tok(texts, truncation=True, max_length=config.max_tokens_for("paragraph"))``.
        """
        if view is not None:
            if view not in self.token_budgets:
                known = ", ".join(sorted(self.token_budgets)) or "none recorded"
                raise KeyError(f"no token budget for view {view!r} (budgets: {known})")
            return self.token_budgets[view]
        if self.default_max_tokens is not None:
            return self.default_max_tokens
        if self.max_positions is not None:
            return self.max_positions
        raise ValueError("this config records neither token budgets nor default_max_tokens")

    def _check_budgets_fit(self, positions: int) -> None:
        named = dict(self.token_budgets)
        if self.default_max_tokens is not None:
            named["default_max_tokens"] = self.default_max_tokens
        over = {k: v for k, v in named.items() if v > positions}
        if over:
            raise ValueError(f"token budgets {over} exceed the text encoder's {positions} positions")


def _sub_config(name: str, value: Any, cls: type) -> Any:
    if isinstance(value, dict):
        return cls(**{k: v for k, v in value.items() if k not in ("model_type", "transformers_version")})
    if not isinstance(value, cls):
        raise TypeError(f"{name} must be a {cls.__name__} or a dict, found {type(value).__name__}")
    return value


def _whole(config: PretrainedConfig) -> dict[str, Any]:
    return {k: v for k, v in config.to_dict().items() if k not in ("transformers_version", "_name_or_path")}


class VlrTextEncoderConfig(VlrRetrievalConfig):
    """BLIP's text encoder + ``text_proj``, and the frozen image side its texts were aligned to.

    Args:
        text_config: a ``BlipTextConfig`` (or its dict) for the text encoder, kept whole,
            cross-attention included, so trained BLIP state dicts load 1:1.
        vision_config: a ``BlipVisionConfig`` (or its dict) of BLIP's ViT, whose ``[CLS]``
            state through ``vision_proj`` (``hidden_size`` -> ``embed_dim``) is the image
            embedding; ``None`` for a text-only model (its images were embedded by something
            the export could not bundle, see ``image_embedding_space``).
        **kwargs: the shared fields of :class:`VlrRetrievalConfig`.

    ``default_max_tokens`` falls back to the encoder's positions when no budget is given.
    """

    model_type = "vlr_blip_text_encoder"
    # transformers 4.x reads ``sub_configs``; 5.x derives it from ``sub_configs_defaults``
    sub_configs = {"text_config": BlipTextConfig, "vision_config": BlipVisionConfig}

    def __init__(self, text_config: dict[str, Any] | BlipTextConfig | None = None,
                 vision_config: dict[str, Any] | BlipVisionConfig | None = None, **kwargs: Any) -> None:
        self.text_config = BlipTextConfig() if text_config is None else _sub_config(
            "text_config", text_config, BlipTextConfig)
        self.vision_config = None if vision_config is None else _sub_config(
            "vision_config", vision_config, BlipVisionConfig)
        super().__init__(**kwargs)
        self._check_budgets_fit(self.max_positions)

    @property
    def max_positions(self) -> int:
        return self.text_config.max_position_embeddings

    @property
    def has_image_tower(self) -> bool:
        """Whether the model embeds images itself (``get_image_features``)."""
        return self.vision_config is not None

    def to_diff_dict(self) -> dict[str, Any]:
        # the whole sub-configs are written, not their difference from BLIP's defaults, so the
        # saved architecture does not change when a transformers release changes them
        out = super().to_diff_dict()
        out["text_config"] = _whole(self.text_config)
        if self.vision_config is not None:
            out["vision_config"] = _whole(self.vision_config)
        else:
            out.pop("vision_config", None)
        return out
