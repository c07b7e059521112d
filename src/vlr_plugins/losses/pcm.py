"""Primary-component matching (Long-CLIP): long captions against the full image features,
short captions against the image features reduced to the batch's top principal components.

The InfoNCE terms are :func:`~vlr_plugins.losses.multi_positive_infonce` (one caption per
image); rows are gathered with :mod:`vlr_plugins.losses._gather`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from vlr_plugins.losses._gather import gather_rows_with_grad, should_gather
from vlr_plugins.losses.infonce import _ContrastiveLoss
from vlr_plugins.losses.functional import (
    _check_label_smoothing,
    _check_temperature,
    multi_positive_infonce,
)
from vlr_plugins.registry import LOSSES

__all__ = [
    "PrimaryComponentMatchingLoss",
    "primary_component_matching",
    "principal_component_reconstruction",
]

_WHERE = "primary_component_matching"
# Long-CLIP train/train.py: --log_scale 4.6052 = log(100), i.e. logit scale 100
LONG_CLIP_TEMPERATURE = 0.01
_warned_no_op = False


def principal_component_reconstruction(features: Tensor, num_components: int) -> Tensor:
    """The rows of ``features`` projected onto the top principal components, mean re-added.

    Expects ``features`` ``(B, D)``; returns ``(B, D)``: with ``mean`` the row mean and
    ``V_k`` ``(D, k)`` the top ``k = num_components`` right singular vectors of
    ``features - mean``, ``(features - mean) @ V_k @ V_k.T + mean``. This is Long-CLIP's
    ``CLIP.PCA`` (model/model_longclip.py): SVD of the centred rows, computed in at least
    float32 (half / bfloat16 inputs are upcast, the result is cast back). Gradients flow
    through the mean and the SVD, as in Long-CLIP (nothing is detached).

    The centred rows span at most ``min(B - 1, D)`` dimensions, so for
    ``num_components >= min(B - 1, D)`` the reconstruction is exact; ``features`` is then
    returned as is: the same value and Jacobian (the identity) without an SVD whose
    vanishing singular values only add rounding.
    """
    if features.ndim != 2:
        raise ValueError(f"principal_component_reconstruction: features must be 2-D (rows, dim); "
                         f"found shape {tuple(features.shape)}")
    _check_num_components("principal_component_reconstruction", num_components)
    rows, dim = features.shape
    if num_components >= min(rows - 1, dim):
        return features
    work = torch.promote_types(features.dtype, torch.float32)
    x = features.to(work)
    mean = x.mean(dim=0, keepdim=True)
    centred = x - mean
    _, _, vh = torch.linalg.svd(centred, full_matrices=False)
    components = vh[:num_components].T  # (D, k)
    return (centred @ components @ components.T + mean).to(features.dtype)


def primary_component_matching(
    image_emb: Tensor,
    long_text_emb: Tensor,
    short_text_emb: Tensor,
    *,
    num_components: int = 32,
    temperature: float | Tensor = LONG_CLIP_TEMPERATURE,
    short_weight: float = 1.0,
    gather: bool | None = None,
    label_smoothing: float = 0.0,
) -> Tensor:
    """Long-CLIP's loss: InfoNCE to long captions plus InfoNCE of PCA-reduced images to short.

    Fine-grained InfoNCE (full image, long caption) plus coarse-grained InfoNCE (image
    reduced to the batch's primary components, short caption).

    Expects:
        image_emb: ``(B, D)`` image embeddings.
        long_text_emb: ``(B, D)`` the long (detailed) caption of each image, in image order.
        short_text_emb: ``(B, D)`` the short (summary) caption of each image, in image order.
        num_components: principal components kept for the coarse term (Long-CLIP: 32).
        temperature: a positive float or a 0-d tensor (learnable); Long-CLIP: 0.01.
        short_weight: weight of the coarse term (Long-CLIP: 1, ``loss_long + loss_short``).
        gather: gather all ranks' rows (with gradient), take the principal components of
            the global batch and compute the loss on it; ``None`` = when
            ``torch.distributed`` runs with > 1 process.
        label_smoothing: ``eps`` of all four cross-entropies (Long-CLIP: 0.1), as
            ``F.cross_entropy(..., label_smoothing=eps)``.

    Formula (where Long-CLIP normalises: image and text embeddings are L2-normalised
    first; the PCA runs on the normalised image rows and its output is *not*
    re-normalised, so the coarse logits are dot products, not cosines)::

        x = normalize(image_emb); l = normalize(long_text_emb); s = normalize(short_text_emb)
        x_pc = principal_component_reconstruction(x, num_components)   # global batch
        CLIP(a, b) = (CE(a @ b.T / T, arange(B)) + CE(b @ a.T / T, arange(B))) / 2   # CE smoothed by eps
        loss = CLIP(x, l) + short_weight * CLIP(x_pc, s)

    Warns once per process when ``B - 1 <= num_components`` (or ``D <= num_components``)
    for the global batch size ``B``: the reconstruction is then exact and the coarse term
    is plain InfoNCE against the short captions (Long-CLIP issue #68).

    Reference:
        Zhang et al., "Long-CLIP: Unlocking the Long-Text Capability of CLIP", ECCV 2024;
        code: github.com/beichenzbc/Long-CLIP, model/model_longclip.py (``PCA``, ``forward``).

    Relations:
        Each term is :func:`~vlr_plugins.losses.multi_positive_infonce` with one caption per
        image (= ``InfoNCELoss``). Long-CLIP smooths all four cross-entropies by 0.1
        (``label_smoothing=0.1``; the default here is 0, plain InfoNCE). Difference from
        Long-CLIP's code: in a distributed run the components come from the global batch
        and every rank returns the global loss, where Long-CLIP takes them from each rank's
        local batch and computes local rows against gathered columns. On one process the
        two agree. Module: ``PrimaryComponentMatchingLoss``.

    Example:
        >>> import torch
        >>> from vlr_plugins.losses import primary_component_matching
        >>> image, long_text, short_text = torch.randn(3, 40, 16).unbind(0)
        >>> loss = primary_component_matching(image, long_text, short_text, num_components=4)
        >>> loss.shape
        torch.Size([])
    """
    _check_arguments(image_emb, long_text_emb, short_text_emb, num_components, temperature,
                     short_weight)
    _check_label_smoothing(_WHERE, label_smoothing)
    image = F.normalize(image_emb, dim=-1)
    long_text, short_text = long_text_emb, short_text_emb
    if isinstance(temperature, Tensor):
        temperature = temperature.reshape(())

    if should_gather(gather):
        image = gather_rows_with_grad(image)
        long_text = gather_rows_with_grad(long_text)
        short_text = gather_rows_with_grad(short_text)

    rows, dim = image.shape
    if num_components >= min(rows - 1, dim):
        _warn_no_op(rows, dim, num_components)
    owner = torch.arange(rows, device=image.device)
    fine = multi_positive_infonce(image, long_text, owner, temperature=temperature, gather=False,
                                  label_smoothing=label_smoothing)
    if short_weight == 0:
        return fine

    reduced = principal_component_reconstruction(image, num_components)
    lifted, scale = _lift_to_common_norm(reduced)
    coarse = multi_positive_infonce(
        lifted, F.pad(short_text, (0, 1)), owner, temperature=temperature / scale, gather=False,
        label_smoothing=label_smoothing,
    )
    return fine + short_weight * coarse


def _lift_to_common_norm(rows: Tensor) -> tuple[Tensor, Tensor]:
    """``rows`` ``(B, D)`` plus one coordinate that brings every row to the norm ``c``.

    ``multi_positive_infonce`` L2-normalises its inputs, but Long-CLIP scores the
    reconstructed image rows without re-normalising them. Appending
    ``sqrt(c**2 - |row|**2)`` (and a zero coordinate to the captions) makes the
    normalisation a division by the constant ``c`` for every row, which dividing the
    temperature by ``c`` undoes: the logits stay ``row @ caption / T``. ``c`` is any
    constant above the largest norm, so it is detached; ``1 + max`` keeps the square
    root away from 0, where its derivative is infinite.
    """
    squared = (rows * rows).sum(dim=1, keepdim=True)
    scale = 1 + squared.detach().max().sqrt()
    return torch.cat([rows, (scale**2 - squared).sqrt()], dim=1), scale


def _warn_no_op(rows: int, dim: int, num_components: int) -> None:
    global _warned_no_op
    if _warned_no_op:
        return
    _warned_no_op = True
    warnings.warn(
        f"{_WHERE}: keeping num_components={num_components} principal components of a global "
        f"batch of {rows} image embeddings of size {dim} reconstructs them exactly (the centred "
        f"batch spans at most min(B - 1, D) = {min(rows - 1, dim)} dimensions), so the "
        f"short-caption term equals plain InfoNCE and primary-component matching does nothing "
        f"(Long-CLIP issue #68, github.com/beichenzbc/Long-CLIP/issues/68). Use a global batch "
        f"larger than num_components + 1 = {num_components + 1} or fewer components. "
        f"(Warned once per process.)",
        UserWarning,
        stacklevel=3,
    )


def _check_num_components(where: str, num_components: int) -> None:
    if isinstance(num_components, bool) or not isinstance(num_components, int) or num_components < 1:
        raise ValueError(f"{where}: num_components must be an integer >= 1; found {num_components!r}")


def _check_arguments(
    image_emb: Tensor,
    long_text_emb: Tensor,
    short_text_emb: Tensor,
    num_components: int,
    temperature: float | Tensor,
    short_weight: float,
) -> None:
    _check_num_components(_WHERE, num_components)
    if not short_weight >= 0:
        raise ValueError(f"{_WHERE}: short_weight must be >= 0; found {short_weight!r}")
    _check_temperature(_WHERE, temperature)
    if image_emb.ndim != 2:
        raise ValueError(
            f"{_WHERE}: image_emb must be 2-D (rows, dim); found shape {tuple(image_emb.shape)}"
        )
    for name, text in (("long_text_emb", long_text_emb), ("short_text_emb", short_text_emb)):
        if text.shape != image_emb.shape:
            raise ValueError(
                f"{_WHERE}: {name} must hold one caption per image, in image order: expected "
                f"shape {tuple(image_emb.shape)} (that of image_emb), found {tuple(text.shape)}"
            )


@LOSSES.register
class PrimaryComponentMatchingLoss(_ContrastiveLoss):
    """Long-CLIP's primary-component matching: long captions vs images, short vs PCA-reduced.

    Fine-grained InfoNCE between images and long captions plus coarse-grained InfoNCE
    between the images reduced to the batch's principal components and short captions.

    Expects ``image_emb`` ``(B, D)``, ``long_text_emb`` ``(B, D)`` and ``short_text_emb``
    ``(B, D)``: a long and a short caption per image, in image order. Embeddings are
    L2-normalised inside; the PCA-reduced image rows are not re-normalised (as in Long-CLIP).
    The keyword ``temperature`` (a positive float or a 0-d tensor, gradients flow into a
    tensor) sets this call's temperature, e.g. ``1 / logit_scale`` of the model being
    trained; ``None`` = the module's own (learnable and clamped by default).
    ``label_smoothing`` smooths the four cross-entropies (Long-CLIP: 0.1); ``cache_chunk``
    turns on gradient caching in the trainers (``CachedPrimaryComponentMatchingLoss``):
    the batch's principal components still come from all its rows.

    Formula: with ``x_pc`` the image rows projected onto the top ``num_components``
    principal components of the (global) batch, mean re-added,
    ``loss = CLIP(x, long) + short_weight * CLIP(x_pc, short)``, ``CLIP`` the symmetric
    InfoNCE at ``temperature``. Warns once per process when the global batch has at most
    ``num_components + 1`` rows: the reduction is then exact and the loss is InfoNCE on
    both captions (Long-CLIP issue #68).

    Reference: Zhang et al., "Long-CLIP: Unlocking the Long-Text Capability of CLIP",
    ECCV 2024 (github.com/beichenzbc/Long-CLIP).

    Relations: wraps :func:`~vlr_plugins.losses.primary_component_matching`; each term is
    ``InfoNCELoss``. The defaults are Long-CLIP's: 32 components, short weight 1, and a
    learnable temperature starting at 0.01 (logit scale 100); Long-CLIP leaves it
    unclamped, here it is clamped to ``temperature_range``. Long-CLIP's label smoothing
    is ``label_smoothing=0.1`` (the recipe ``open_clip/long_clip`` sets it; the default
    is 0).

    Example:
        >>> import torch
        >>> from vlr_plugins.losses import PrimaryComponentMatchingLoss
        >>> loss_fn = PrimaryComponentMatchingLoss(num_components=4)
        >>> image, long_text, short_text = torch.randn(3, 40, 16).unbind(0)
        >>> loss = loss_fn(image, long_text, short_text)
        >>> loss.backward()
        >>> loss_fn.temperature.grad is not None
        True
    """

    def __init__(
        self,
        num_components: int = 32,
        short_weight: float = 1.0,
        temperature: float = LONG_CLIP_TEMPERATURE,
        learnable_temperature: bool = True,
        temperature_range: Sequence[float] = (0.001, 0.5),
        gather: bool | None = None,
        label_smoothing: float = 0.0,
        cache_chunk: int | None = None,
    ) -> None:
        super().__init__(temperature, learnable_temperature, temperature_range, gather,
                         label_smoothing, cache_chunk)
        where = type(self).__name__
        _check_num_components(where, num_components)
        if not short_weight >= 0:
            raise ValueError(f"{where}: short_weight must be >= 0; found {short_weight!r}")
        self.num_components = num_components
        self.short_weight = float(short_weight)

    def forward(
        self,
        image_emb: Tensor,
        long_text_emb: Tensor,
        short_text_emb: Tensor,
        *,
        temperature: float | Tensor | None = None,
    ) -> Tensor:
        return primary_component_matching(
            image_emb, long_text_emb, short_text_emb,
            num_components=self.num_components,
            temperature=self._temperature(temperature),
            short_weight=self.short_weight,
            gather=self.gather,
            label_smoothing=self.label_smoothing,
        )

    def get_config_dict(self) -> dict[str, Any]:
        return {"num_components": self.num_components, "short_weight": self.short_weight,
                **super().get_config_dict()}
