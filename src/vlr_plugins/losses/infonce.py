"""InfoNCE modules over :func:`~vlr_plugins.losses.multi_positive_infonce`: one caption
per image, several captions, hard negatives; fixed or learnable (clamped) temperature,
label smoothing, and the chunk size of gradient caching for the trainers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from vlr_plugins.losses.functional import (
    HARD_NEGATIVE_SCOPES,
    VARIANTS,
    _check_label_smoothing,
    _check_temperature,
    multi_positive_infonce,
)
from vlr_plugins.losses.gradcache import _check_cache_chunk
from vlr_plugins.registry import LOSSES

__all__ = ["InfoNCELoss", "MultiPositiveInfoNCELoss", "HardNegativeInfoNCELoss"]


class _ContrastiveLoss(nn.Module):
    """Temperature, ``gather``, label smoothing, cache chunk and config shared by the
    InfoNCE modules.

    Every ``forward`` takes an optional keyword ``temperature``, as open_clip's
    ``ClipLoss.forward(image_features, text_features, logit_scale)`` takes its scale at
    call time: a positive float or a 0-d tensor (gradients flow into a tensor, e.g.
    ``1 / model.logit_scale.exp()``) used for that call instead of the module's own;
    ``None`` = the module's own temperature (fixed, or learnable and clamped).

    ``label_smoothing`` (``eps`` in ``[0, 1]``) smooths every cross-entropy of the loss as
    :func:`~vlr_plugins.losses.multi_positive_infonce` documents. ``cache_chunk`` (rows,
    or ``None``) is not used by ``forward``: it asks the trainer integrations (MMEngine,
    open_clip, LAVIS) to encode the texts, and a trained vision tower's images, with
    gradient caching in chunks of that many rows
    (:func:`~vlr_plugins.losses.cached_encode`); loss and gradients stay the uncached ones.
    """

    # what a loss can consume; recipes are checked against these before training
    single_positive: bool = False
    accepts_negatives: bool = False
    requires_negatives: bool = False

    def __init__(
        self,
        temperature: float = 0.07,
        learnable_temperature: bool = False,
        temperature_range: Sequence[float] = (0.001, 0.5),
        gather: bool | None = None,
        label_smoothing: float = 0.0,
        cache_chunk: int | None = None,
    ) -> None:
        super().__init__()
        where = type(self).__name__
        _check_label_smoothing(where, label_smoothing)
        _check_cache_chunk(where, cache_chunk)
        low, high = (float(t) for t in temperature_range)
        if not 0 < low < high:
            raise ValueError(
                f"{where}: temperature_range must be (low, high) with 0 < low < high; "
                f"found {tuple(temperature_range)}"
            )
        if not temperature > 0:
            raise ValueError(f"{where}: temperature must be > 0; found {temperature!r}")
        if learnable_temperature and not low <= temperature <= high:
            raise ValueError(
                f"{where}: a learnable temperature starts inside temperature_range: expected "
                f"{low} <= temperature <= {high}, found {temperature}"
            )
        self.learnable_temperature = bool(learnable_temperature)
        self.temperature_range = (low, high)
        self.gather = gather
        self.label_smoothing = float(label_smoothing)
        self.cache_chunk = cache_chunk
        self.temperature: nn.Parameter | float
        if self.learnable_temperature:
            self.temperature = nn.Parameter(torch.tensor(float(temperature)))
        else:
            self.temperature = float(temperature)

    def _temperature(self, given: float | Tensor | None = None) -> Tensor | float:
        """``given`` (checked) when the caller passes one, else the module's own."""
        if given is not None:
            _check_temperature(f"{type(self).__name__}.forward", given)
            return given
        if isinstance(self.temperature, nn.Parameter):
            # as BLIP does with its learnable temp: keep it in range without
            # letting the clamp itself enter the graph
            with torch.no_grad():
                self.temperature.clamp_(*self.temperature_range)
        return self.temperature

    def _owner(self, image_emb: Tensor, text_emb: Tensor, text_owner: Tensor | None) -> Tensor:
        if text_owner is not None:
            return text_owner
        if text_emb.shape[0] != image_emb.shape[0]:
            raise ValueError(
                f"{type(self).__name__}: text_owner=None means caption i belongs to image i, "
                f"which needs as many captions as images; found {image_emb.shape[0]} images "
                f"and {text_emb.shape[0]} captions"
            )
        return torch.arange(image_emb.shape[0], device=image_emb.device)

    def _no_negatives(self, neg_emb: Tensor | None, neg_owner: Tensor | None) -> None:
        if neg_emb is not None or neg_owner is not None:
            raise ValueError(
                f"{type(self).__name__} takes no hard negatives; found neg_emb/neg_owner "
                f"(use HardNegativeInfoNCELoss)"
            )

    def _loss(
        self,
        image_emb: Tensor,
        text_emb: Tensor,
        text_owner: Tensor | None,
        temperature: float | Tensor | None,
        **kwargs: Any,
    ) -> Tensor:
        return multi_positive_infonce(
            image_emb,
            text_emb,
            self._owner(image_emb, text_emb, text_owner),
            temperature=self._temperature(temperature),
            gather=self.gather,
            label_smoothing=self.label_smoothing,
            **kwargs,
        )

    def get_config_dict(self) -> dict[str, Any]:
        """Hyperparameters for the model card; ``type(self)(**config)`` rebuilds the loss
        (with the current, possibly learned, temperature)."""
        t = self.temperature
        return {
            "temperature": float(t.detach()) if isinstance(t, Tensor) else t,
            "learnable_temperature": self.learnable_temperature,
            "temperature_range": self.temperature_range,
            "gather": self.gather,
            "label_smoothing": self.label_smoothing,
            "cache_chunk": self.cache_chunk,
        }

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.get_config_dict().items())


@LOSSES.register
class InfoNCELoss(_ContrastiveLoss):
    """Symmetric CLIP InfoNCE over B image-caption pairs, exactly one caption per image.

    Expects ``image_emb`` ``(B, D)``, ``text_emb`` ``(B, D)`` and optionally
    ``text_owner`` ``(B,)`` (a permutation of ``0..B-1``; ``None`` = caption ``i``
    describes image ``i``). Embeddings are L2-normalised inside. The keyword
    ``temperature`` (a positive float or a 0-d tensor, gradients flow into a tensor)
    sets this call's temperature, as ``ClipLoss`` takes ``logit_scale`` at call time;
    ``None`` = the module's own (fixed, or learnable and clamped). ``label_smoothing``
    smooths both cross-entropies as ``F.cross_entropy(..., label_smoothing=)`` does;
    ``cache_chunk`` turns on gradient caching in the trainers (``CachedInfoNCELoss``).

    Formula: ``s = cos(image, text) / temperature`` ``(B, B)``; with captions in image
    order, ``loss = (CE(s, arange(B)) + CE(s.T, arange(B))) / 2``.

    Reference: Radford et al., "Learning Transferable Visual Models From Natural
    Language Supervision" (CLIP), 2021.

    Relations: equals open_clip's ``ClipLoss`` with ``logit_scale = 1 / temperature``
    (``loss_fn(image, text, temperature=1 / logit_scale)`` is ``ClipLoss()(image, text,
    logit_scale)``);
    ``MultiPositiveInfoNCELoss`` allows several captions per image and
    ``HardNegativeInfoNCELoss`` adds hard-negative captions. A learnable temperature
    (``learnable_temperature=True``) is clamped to ``temperature_range`` at every
    forward, as in BLIP.

    Example:
        >>> import torch
        >>> from vlr_plugins.losses import InfoNCELoss
        >>> loss_fn = InfoNCELoss(temperature=0.07, learnable_temperature=True)
        >>> loss = loss_fn(torch.randn(4, 16), torch.randn(4, 16))
        >>> loss.backward()
        >>> loss_fn.temperature.grad is not None
        True
    """

    single_positive = True

    def forward(
        self,
        image_emb: Tensor,
        text_emb: Tensor,
        text_owner: Tensor | None = None,
        neg_emb: Tensor | None = None,
        neg_owner: Tensor | None = None,
        *,
        temperature: float | Tensor | None = None,
    ) -> Tensor:
        self._no_negatives(neg_emb, neg_owner)
        if text_emb.shape[0] != image_emb.shape[0]:
            raise ValueError(
                f"InfoNCELoss needs exactly one caption per image: expected {image_emb.shape[0]} "
                f"captions, found {text_emb.shape[0]} (use MultiPositiveInfoNCELoss)"
            )
        # with as many captions as images, "every image has a caption" (checked by
        # multi_positive_infonce) is "every image has exactly one"
        return self._loss(image_emb, text_emb, text_owner, temperature)


@LOSSES.register
class MultiPositiveInfoNCELoss(_ContrastiveLoss):
    """Symmetric InfoNCE where each image has one or more captions (multi-positive).

    Expects ``image_emb`` ``(B, D)``, ``text_emb`` ``(N, D)`` and ``text_owner``
    ``(N,)``, the image ``0..B-1`` each caption describes (every image at least once,
    e.g. ``[0, 0, 1, 2, 2, 2]``). Embeddings are L2-normalised inside. The keyword
    ``temperature`` (a positive float or a 0-d tensor, gradients flow into a tensor)
    sets this call's temperature; ``None`` = the module's own (fixed, or learnable and
    clamped). ``label_smoothing`` and ``cache_chunk`` (gradient caching in the trainers,
    ``CachedMultiPositiveInfoNCELoss``) as in ``InfoNCELoss``; with several captions the
    smoothing is that of :func:`~vlr_plugins.losses.multi_positive_infonce`.

    Formula: with ``p_i`` the softmax of image ``i`` over all N captions and ``P(i)``
    its captions, ``variant="mean_log"``: ``-mean_{j in P(i)} log p_i(j)``;
    ``variant="log_sum"``: ``-log sum_{j in P(i)} p_i(j)``; every caption's
    text-to-image term is ``-log softmax`` at its owner;
    ``loss = (mean over images + mean over captions) / 2``.

    Reference: Li et al., "BLIP", 2022 (soft targets ``pos / pos.sum(1)``, =
    ``mean_log``); Miech et al., "End-to-End Learning of Visual Representations from
    Uncurated Instructional Videos" (MIL-NCE, = ``log_sum``), 2020.

    Relations: with one caption per image it equals ``InfoNCELoss`` (both variants).
    ``mean_log`` pulls every caption to its image; ``log_sum`` is satisfied once one
    caption matches, tolerating noisy captions. ``HardNegativeInfoNCELoss`` adds
    hard-negative captions.

    Example:
        >>> import torch
        >>> from vlr_plugins.losses import MultiPositiveInfoNCELoss
        >>> loss_fn = MultiPositiveInfoNCELoss(variant="log_sum")
        >>> owner = torch.tensor([0, 0, 1, 2, 2, 2])
        >>> loss = loss_fn(torch.randn(3, 16), torch.randn(6, 16), owner)
        >>> loss.shape
        torch.Size([])
    """

    single_positive = False

    def __init__(
        self,
        variant: str = "mean_log",
        temperature: float = 0.07,
        learnable_temperature: bool = False,
        temperature_range: Sequence[float] = (0.001, 0.5),
        gather: bool | None = None,
        label_smoothing: float = 0.0,
        cache_chunk: int | None = None,
    ) -> None:
        super().__init__(temperature, learnable_temperature, temperature_range, gather,
                         label_smoothing, cache_chunk)
        if variant not in VARIANTS:
            raise ValueError(f"{type(self).__name__}: variant must be one of {VARIANTS}; "
                             f"found {variant!r}")
        self.variant = variant

    def forward(
        self,
        image_emb: Tensor,
        text_emb: Tensor,
        text_owner: Tensor | None = None,
        neg_emb: Tensor | None = None,
        neg_owner: Tensor | None = None,
        *,
        temperature: float | Tensor | None = None,
    ) -> Tensor:
        self._no_negatives(neg_emb, neg_owner)
        return self._loss(image_emb, text_emb, text_owner, temperature, variant=self.variant)

    def get_config_dict(self) -> dict[str, Any]:
        return {"variant": self.variant, **super().get_config_dict()}


@LOSSES.register
class HardNegativeInfoNCELoss(MultiPositiveInfoNCELoss):
    """Multi-positive InfoNCE whose image-to-text softmax also contains hard negatives.

    Expects ``image_emb`` ``(B, D)``, ``text_emb`` ``(N, D)``, ``text_owner`` ``(N,)``
    as ``MultiPositiveInfoNCELoss``, plus ``neg_emb`` ``(M, D)`` hard-negative captions
    (e.g. word-order or attribute swaps of a positive) and ``neg_owner`` ``(M,)``, the
    image each was written for (required by ``hard_negative_scope="own"``). The keyword
    ``temperature`` (a positive float or a 0-d tensor, gradients flow into a tensor)
    sets this call's temperature; ``None`` = the module's own (fixed, or learnable and
    clamped). ``label_smoothing`` spreads its share over the captions and the negatives
    each image sees; ``cache_chunk`` as in ``InfoNCELoss`` (``CachedHardNegativeInfoNCELoss``).

    Formula: as ``MultiPositiveInfoNCELoss``, but image ``i``'s softmax runs over the
    N captions plus the negatives it sees: all M (``"batch"``, NegCLIP) or those with
    ``neg_owner == i`` (``"own"``). Negatives are never queries or positives, so the
    text-to-image term is unchanged.

    Reference: Yuksekgonul et al., "When and Why Vision-Language Models Behave like
    Bags-of-Words, and What to Do About It?" (NegCLIP), ICLR 2023.

    Relations: without negatives it would be ``MultiPositiveInfoNCELoss`` (it requires
    them, so a data pipeline that silently drops negatives fails loudly). ``"own"``
    only asks each image to prefer its captions over its own perturbations; ``"batch"``
    also uses other images' negatives as extra in-batch negatives.

    Example:
        >>> import torch
        >>> from vlr_plugins.losses import HardNegativeInfoNCELoss
        >>> loss_fn = HardNegativeInfoNCELoss(hard_negative_scope="own")
        >>> owner = torch.tensor([0, 1, 1])
        >>> loss = loss_fn(torch.randn(2, 16), torch.randn(3, 16), owner,
        ...                neg_emb=torch.randn(4, 16), neg_owner=torch.tensor([0, 0, 1, 1]))
        >>> loss.shape
        torch.Size([])
    """

    accepts_negatives = True
    requires_negatives = True

    def __init__(
        self,
        hard_negative_scope: str = "batch",
        variant: str = "mean_log",
        temperature: float = 0.07,
        learnable_temperature: bool = False,
        temperature_range: Sequence[float] = (0.001, 0.5),
        gather: bool | None = None,
        label_smoothing: float = 0.0,
        cache_chunk: int | None = None,
    ) -> None:
        super().__init__(variant, temperature, learnable_temperature, temperature_range, gather,
                         label_smoothing, cache_chunk)
        if hard_negative_scope not in HARD_NEGATIVE_SCOPES:
            raise ValueError(
                f"{type(self).__name__}: hard_negative_scope must be one of "
                f"{HARD_NEGATIVE_SCOPES}; found {hard_negative_scope!r}"
            )
        self.hard_negative_scope = hard_negative_scope

    def forward(
        self,
        image_emb: Tensor,
        text_emb: Tensor,
        text_owner: Tensor | None = None,
        neg_emb: Tensor | None = None,
        neg_owner: Tensor | None = None,
        *,
        temperature: float | Tensor | None = None,
    ) -> Tensor:
        if neg_emb is None:
            raise ValueError(
                "HardNegativeInfoNCELoss needs hard negatives: expected neg_emb (M, D), found "
                "None (use MultiPositiveInfoNCELoss without them)"
            )
        return self._loss(image_emb, text_emb, text_owner, temperature, neg_emb=neg_emb,
                          neg_owner=neg_owner, variant=self.variant,
                          hard_negative_scope=self.hard_negative_scope)

    def get_config_dict(self) -> dict[str, Any]:
        return {"hard_negative_scope": self.hard_negative_scope, **super().get_config_dict()}


def _without_infonce_options(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` less the InfoNCE modules' ``label_smoothing`` and ``cache_chunk``, for the
    losses that share their base class but take neither (the video-text losses)."""
    return {k: v for k, v in config.items() if k not in ("label_smoothing", "cache_chunk")}
