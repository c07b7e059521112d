"""open_clip_train's loss slot filled with a core loss of :data:`vlr_plugins.registry.LOSSES`."""

from __future__ import annotations

import inspect
from typing import Any, Literal

import torch
from torch import Tensor, nn

from vlr_plugins.integrations.open_clip.options import TEMPERATURE_SOURCES
from vlr_plugins.registry import LOSSES

__all__ = ["OpenCLIPLoss", "build_openclip_loss", "TEMPERATURE_SOURCES"]


def _takes(loss: nn.Module, argument: str) -> bool:
    return argument in inspect.signature(loss.forward).parameters


class OpenCLIPLoss(nn.Module):
    """Calls a core loss with what :class:`TextBatchCLIP` returns, as open_clip_train calls
    its losses: ``loss(**model_out, output_dict=True)`` -> ``{"contrastive_loss": value}``.

    Expects ``image_features`` ``(B, D)``, ``text_features`` ``(N, D)``, ``logit_scale``
    (already exponentiated), ``text_owner`` ``(N,)``; optionally ``neg_features`` /
    ``neg_owner`` (hard negatives) and ``short_text_features`` ``(B, D)`` for a loss
    whose forward takes ``short_text_emb`` (``PrimaryComponentMatchingLoss``).

    ``temperature="model"``: the loss is called with ``temperature=1 / logit_scale``,
    open_clip's learnable (and clamped) scale, as ``ClipLoss`` is called with
    ``logit_scale``, so training moves it as it moves ``ClipLoss``'s (the gradient flows
    through the call); the loss's own ``temperature`` is not used. ``"loss"``: the loss's
    own, fixed temperature. A loss with a learnable temperature of its own is refused
    either way: open_clip_train's optimizer only holds the model's parameters, so it would
    never update it.

    No arithmetic happens here: with one caption per image and ``InfoNCELoss`` this is
    open_clip's ``ClipLoss(local_loss=False, gather_with_grad=True)``.
    """

    def __init__(self, loss: nn.Module, temperature: Literal["model", "loss"] = "model") -> None:
        super().__init__()
        if temperature not in TEMPERATURE_SOURCES:
            raise ValueError(
                f"temperature must be one of {TEMPERATURE_SOURCES}; found {temperature!r}"
            )
        name = type(loss).__name__
        if isinstance(getattr(loss, "temperature", None), nn.Parameter):
            fix = (
                "the model's logit_scale is the learnable temperature here"
                if temperature == "model"
                else "or take the model's logit_scale (temperature='model')"
            )
            raise ValueError(
                f"{name} has a learnable temperature of its own, which open_clip_train's "
                f"optimizer (the model's parameters only) would never update; build it with "
                f"learnable_temperature=False ({fix})"
            )
        if temperature == "model" and not _takes(loss, "temperature"):
            raise ValueError(
                f"{name}.forward takes no temperature keyword, so it cannot run at the "
                f"model's logit_scale; use the loss's own (temperature='loss')"
            )
        self.loss = loss
        self.temperature = temperature
        self.wants_short_captions = _takes(loss, "short_text_emb")
        #: rows per encoder call with gradient caching (the loss's), for TextBatchCLIP
        self.cache_chunk: int | None = getattr(loss, "cache_chunk", None)

    def forward(
        self,
        image_features: Tensor,
        text_features: Tensor,
        logit_scale: Tensor,
        text_owner: Tensor | None = None,
        neg_features: Tensor | None = None,
        neg_owner: Tensor | None = None,
        short_text_features: Tensor | None = None,
        output_dict: bool = False,
        **unexpected: Any,
    ) -> Tensor | dict[str, Tensor]:
        if unexpected:
            raise ValueError(
                f"{type(self.loss).__name__} through open_clip_train got model outputs it cannot "
                f"use: {sorted(unexpected)} (SigLIP's logit_bias, CoCa's caption logits and "
                f"distillation are not supported by the vlr losses)"
            )
        kwargs: dict[str, Any] = {}
        if self.temperature == "model":
            kwargs["temperature"] = 1.0 / logit_scale
        if self.wants_short_captions:
            value = self._short_and_long(
                image_features, text_features, text_owner, short_text_features, kwargs
            )
        else:
            if neg_features is not None:
                kwargs.update(neg_emb=neg_features, neg_owner=neg_owner)
            value = self.loss(image_features, text_features, text_owner, **kwargs)
        return {"contrastive_loss": value} if output_dict else value

    def _short_and_long(
        self,
        image: Tensor,
        long_text: Tensor,
        owner: Tensor | None,
        short_text: Tensor | None,
        kwargs: dict[str, Any],
    ) -> Tensor:
        name = type(self.loss).__name__
        if short_text is None:
            raise ValueError(
                f"{name} needs a short caption per image; the batch has none "
                f"(the dataset makes them with short_text='first-sentence' or 'field:NAME')"
            )
        if owner is not None and not torch.equal(
            owner, torch.arange(image.shape[0], device=owner.device)
        ):
            raise ValueError(
                f"{name} needs exactly one long caption per image, in image order; "
                f"the text views gave {long_text.shape[0]} captions for {image.shape[0]} images"
            )
        return self.loss(image, long_text, short_text, **kwargs)

    def extra_repr(self) -> str:
        return f"temperature={self.temperature!r}"


def build_openclip_loss(
    cfg: dict[str, Any], temperature: Literal["model", "loss"] = "model"
) -> OpenCLIPLoss:
    """Build ``cfg`` (``{"type": <registered loss>, ...}``) from ``LOSSES`` for open_clip_train.

    With ``temperature="model"`` the loss is built with ``learnable_temperature=False``
    (when it takes that argument): the model's ``logit_scale`` is the one learnable
    temperature.
    """
    cfg = dict(cfg)
    cls = LOSSES.get(cfg.get("type", ""))
    params = inspect.signature(cls).parameters
    if temperature == "model" and "learnable_temperature" in params:
        cfg["learnable_temperature"] = False
    return OpenCLIPLoss(LOSSES.build(cfg), temperature)
