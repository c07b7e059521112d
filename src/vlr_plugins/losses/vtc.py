"""Video-text contrastive loss (VTC) over captions of several views (MVC's summary and
detailed captions): symmetric InfoNCE per view, averaged over the views.

Each view's term is :func:`~vlr_plugins.losses.multi_positive_infonce`, so rows are
gathered by :mod:`vlr_plugins.losses._gather` like every other contrastive loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from vlr_plugins.losses.functional import multi_positive_infonce
from vlr_plugins.losses.infonce import _ContrastiveLoss, _without_infonce_options
from vlr_plugins.registry import LOSSES

__all__ = ["video_text_contrastive", "VideoTextContrastiveLoss", "MVC_VIEWS", "UMT_TEMPERATURE"]

#: MVC's caption views, in the order of a dual-CLS encoder's view ids
MVC_VIEWS = ("summary", "detailed")
#: UMT's (and MVC's) initial VTC temperature; UMT learns it, clamped to [0.001, 0.5]
UMT_TEMPERATURE = 0.07


def video_text_contrastive(
    video_emb: Tensor,
    text_emb: Tensor,
    text_owner: Tensor,
    text_view: Tensor | None = None,
    *,
    views: Sequence[str] | None = None,
    temperature: float | Tensor = UMT_TEMPERATURE,
    gather: bool | None = None,
) -> Tensor:
    """Symmetric video-text InfoNCE computed per caption view and averaged over the views.

    Expects:
        video_emb: ``(B, D)`` video embeddings, one row per video.
        text_emb: ``(N, D)`` caption embeddings, each from its view's CLS.
        text_owner: ``(N,)`` integer, the video ``0..B-1`` each caption describes.
        text_view: ``(N,)`` integer, each caption's view (an index into ``views``);
            ``None`` = one view. Every video needs at least one caption of every view.
        views: the view names (for messages); ``None`` = ``0 .. max(text_view)``. In a
            distributed run give them, so that every rank computes the same views.
        temperature: a positive float or a 0-d tensor (learnable).
        gather: as :func:`~vlr_plugins.losses.multi_positive_infonce`.

    Formula (``V`` views, ``T_v`` the captions of view ``v``)::

        loss = 1/V * sum_v multi_positive_infonce(video_emb, text_emb[T_v], text_owner[T_v])

    i.e. per view ``(mean_i -mean_{j in P_v(i)} log p_i(j) + mean_j -log q_j(owner j)) / 2``
    with ``p_i`` the softmax of video ``i`` over the view's captions and ``q_j`` that of
    caption ``j`` over the videos (the ``mean_log`` variant: UMT's soft targets
    ``mask / mask.sum(1)``). With one caption per video and view, each term is CLIP's loss.

    Reference:
        Li et al., "Unmasked Teacher: Towards Training-Efficient Video Foundation Models"
        (UMT), ICCV 2023, code: OpenGVLab/unmasked_teacher, multi_modality/models/
        criterions.py (``VTC_VTM_Loss.vtc_loss``); Thoker & Van Droogenbroeck, "Advancing
        Video-Text Pretraining with Multi-View Captions" (MVC), 2026, sections 3.2 and 4.

    Relations:
        MVC encodes one summary and one detailed caption per video per step, each with its
        view's CLS, "allowing them to be independently aligned with the video": one InfoNCE
        per view, so a video's summary caption never competes with its own detailed caption
        (as it would in one multi-positive softmax over both). UMT has one view; there
        ``text_view=None`` gives its loss. Module: ``VideoTextContrastiveLoss``; part of
        ``VideoTextPretrainingLoss``. Every rank returns the same global loss.

    Example:
        >>> import torch
        >>> from vlr_plugins.losses import video_text_contrastive
        >>> videos, texts = torch.randn(3, 8), torch.randn(6, 8)
        >>> owner = torch.tensor([0, 1, 2, 0, 1, 2])
        >>> view = torch.tensor([0, 0, 0, 1, 1, 1])      # summary, then detailed
        >>> video_text_contrastive(videos, texts, owner, view).shape
        torch.Size([])
    """
    where = "video_text_contrastive"
    rows = view_rows(text_view, text_owner, video_emb.shape[0], views, where)
    terms = [
        multi_positive_infonce(video_emb, text_emb[r], text_owner[r], temperature=temperature,
                               gather=gather)
        for r in rows
    ]
    return torch.stack(terms).mean()


def view_rows(
    text_view: Tensor | None,
    text_owner: Tensor,
    num_videos: int,
    views: Sequence[str] | None,
    where: str,
) -> list[Tensor]:
    """The caption rows of each view, in view order; checks that every video has a caption of
    every view (``text_view=None``: all rows, one view)."""
    if text_view is None:
        if views is not None and len(views) != 1:
            raise ValueError(f"{where}: text_view=None means one caption view; found views "
                             f"{tuple(views)} (give text_view, the view of each caption)")
        return [torch.arange(text_owner.shape[0], device=text_owner.device)]
    if text_view.dtype.is_floating_point or text_view.dtype == torch.bool:
        raise ValueError(f"{where}: text_view must hold integer view indices; found {text_view.dtype}")
    if tuple(text_view.shape) != tuple(text_owner.shape):
        raise ValueError(f"{where}: text_view must have one entry per caption: expected shape "
                         f"{tuple(text_owner.shape)} (that of text_owner), found {tuple(text_view.shape)}")
    names = tuple(views) if views is not None else tuple(
        str(v) for v in range(int(text_view.max()) + 1 if text_view.numel() else 1))
    bad = (text_view < 0) | (text_view >= len(names))
    if bool(bad.any()):
        at = int(bad.nonzero()[0, 0])
        raise ValueError(f"{where}: text_view[{at}] = {int(text_view[at])} is out of range: "
                         f"expected 0 <= view < {len(names)} (views {names})")
    rows = []
    for v, name in enumerate(names):
        r = (text_view == v).nonzero().flatten()
        covered = torch.zeros(num_videos, dtype=torch.bool, device=text_owner.device)
        covered[text_owner[r].long()] = True
        if not bool(covered.all()):
            missing = (~covered).nonzero().flatten().tolist()
            raise ValueError(
                f"{where}: every video needs at least one caption of each view; videos "
                f"{missing[:10]}{' ...' if len(missing) > 10 else ''} have no {name!r} caption"
            )
        rows.append(r)
    return rows


@LOSSES.register
class VideoTextContrastiveLoss(_ContrastiveLoss):
    """Video-text contrastive loss (VTC): symmetric InfoNCE per caption view, averaged.

    Expects ``video_emb`` ``(B, D)``, ``text_emb`` ``(N, D)``, ``text_owner`` ``(N,)`` (the
    video of each caption) and ``text_view`` ``(N,)`` (each caption's index in ``views``;
    ``None`` with a single view). Every video needs a caption of every view. Embeddings are
    L2-normalised inside. The keyword ``temperature`` (a positive float or a 0-d tensor)
    sets this call's temperature; ``None`` = the module's own, learnable from 0.07 and
    clamped to ``temperature_range`` by default, as UMT's ``temp``.

    Formula: ``loss = mean_v InfoNCE_v``, each term
    :func:`~vlr_plugins.losses.multi_positive_infonce` (``mean_log``) between the videos
    and the view's captions.

    Reference: Li et al., "Unmasked Teacher" (UMT), ICCV 2023; Thoker & Van Droogenbroeck,
    "Advancing Video-Text Pretraining with Multi-View Captions" (MVC), 2026 (temperature
    0.07, one summary and one detailed caption per video).

    Relations: wraps :func:`~vlr_plugins.losses.video_text_contrastive`; with one view and
    one caption per video it is ``InfoNCELoss``. ``VideoTextPretrainingLoss`` adds matching
    and masked language modeling.

    Example:
        >>> import torch
        >>> from vlr_plugins.losses import VideoTextContrastiveLoss
        >>> loss_fn = VideoTextContrastiveLoss()        # views ("summary", "detailed")
        >>> owner, view = torch.tensor([0, 1, 0, 1]), torch.tensor([0, 0, 1, 1])
        >>> loss = loss_fn(torch.randn(2, 8), torch.randn(4, 8), owner, view)
        >>> loss.backward()
        >>> loss_fn.temperature.grad is not None
        True
    """

    def __init__(
        self,
        views: Sequence[str] = MVC_VIEWS,
        temperature: float = UMT_TEMPERATURE,
        learnable_temperature: bool = True,
        temperature_range: Sequence[float] = (0.001, 0.5),
        gather: bool | None = None,
    ) -> None:
        super().__init__(temperature, learnable_temperature, temperature_range, gather)
        self.views = _check_views(type(self).__name__, views)

    def forward(
        self,
        video_emb: Tensor,
        text_emb: Tensor,
        text_owner: Tensor,
        text_view: Tensor | None = None,
        *,
        temperature: float | Tensor | None = None,
    ) -> Tensor:
        return video_text_contrastive(
            video_emb, text_emb, text_owner, text_view, views=self.views,
            temperature=self._temperature(temperature), gather=self.gather,
        )

    def get_config_dict(self) -> dict[str, Any]:
        return {"views": list(self.views), **_without_infonce_options(super().get_config_dict())}


def _check_views(where: str, views: Sequence[str]) -> tuple[str, ...]:
    names = tuple(views) if not isinstance(views, str) else (views,)
    if not names or len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"{where}: views must be distinct non-empty names, e.g. {MVC_VIEWS}; "
                         f"found {views!r}")
    return names
