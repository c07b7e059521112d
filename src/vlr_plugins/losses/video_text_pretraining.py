"""UMT / MVC video-text pretraining objective: VTC + VTM + MLM (equal weights by default),
each computed per caption view and averaged over the views, returned term by term.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from vlr_plugins.losses.infonce import _ContrastiveLoss, _without_infonce_options
from vlr_plugins.losses.mlm import MVC_MLM_RATIO, masked_language_modeling
from vlr_plugins.losses.video_text_fusion import VideoTextFusion, check_fusion_model
from vlr_plugins.losses.vtc import (
    MVC_VIEWS,
    UMT_TEMPERATURE,
    _check_views,
    video_text_contrastive,
    view_rows,
)
from vlr_plugins.losses.vtm import video_text_matching
from vlr_plugins.registry import LOSSES

__all__ = ["VideoTextPretrainingLoss"]

TERMS = ("vtc", "vtm", "mlm")


@LOSSES.register
class VideoTextPretrainingLoss(_ContrastiveLoss):
    """UMT's video-text pretraining objective over MVC's caption views: VTC + VTM + MLM.

    Expects, for B videos and N captions (one summary and one detailed caption per video in
    MVC, any number per view in general):

    ==================  ===============  ================================================
    argument            shape            what
    ==================  ===============  ================================================
    ``model``                            implements :class:`~vlr_plugins.losses.VideoTextFusion`
    ``video_emb``       ``(B, D)``       contrastive video embeddings
    ``text_emb``        ``(N, D)``       contrastive caption embeddings (the view's CLS)
    ``text_owner``      ``(N,)``         the video of each caption
    ``text_view``       ``(N,)``         each caption's index in ``views`` (the view ids a
                                         dual-CLS encoder reads); ``None``: one view
    ``video_tokens``    ``(B, Nv, C)``   the video tower's tokens
    ``text_hidden``     ``(N, L, H)``    the text layers' output on ``input_ids``
    ``input_ids``       ``(N, L)``       the captions' token ids (uncorrupted)
    ``attention_mask``  ``(N, L)``       1 = token, 0 = padding
    ``video_mask``      ``(B, Nv)``      optional, 1 = attend
    ``temperature``     scalar           optional, this call's VTC temperature
    ``generator``                        optional, seeds VTM's and MLM's draws
    ==================  ===============  ================================================

    Returns a dict: ``"loss"`` the weighted total (what to backpropagate), ``"vtc"``,
    ``"vtm"``, ``"mlm"`` the unweighted terms (a term of weight 0 is not computed and
    reads 0), and per view, for logging only (detached), ``"vtc_<view>"``,
    ``"vtm_<view>"``, ``"mlm_<view>"``. Only ``"loss"`` contains the word *loss*, so an
    MMEngine model can return the dict as is: ``parse_losses`` sums only that key and logs
    the others.

    Formula (``T_v`` the captions of view ``v``)::

        vtc = mean_v InfoNCE(video_emb, text_emb[T_v])            (video_text_contrastive)
        vtm = mean_{v in matching_views} VTM(T_v)                 (video_text_matching)
        mlm = mean_{v in mlm_views} MLM(T_v)                      (masked_language_modeling)
        loss = vtc_weight * vtc + vtm_weight * vtm + mlm_weight * mlm

    VTM draws its negatives from the similarities at VTC's temperature (UMT); within a view,
    so a caption's negative caption is of the same view. Before VTM and MLM, each view's
    rows are cut to their longest caption (trailing padding columns dropped: the summary
    captions do not pay for the detailed captions' length in the fusion layers).

    Which views feed VTM and MLM: MVC (section 4) says only that the objective "combines
    VTC, VTM, and MLM with equal weights" and that both sampled captions are encoded with
    their view's CLS; UMT applies all three objectives to every caption of the batch. So by
    default both views feed all three terms, each averaged over the views (``matching_views``
    / ``mlm_views`` restrict VTM / MLM to some views, e.g. ``("summary",)`` halves the fusion
    cost). In a distributed run VTC and VTM are global (every rank returns the same value),
    MLM is each rank's own.

    Reference:
        Li et al., "Unmasked Teacher: Towards Training-Efficient Video Foundation Models"
        (UMT), ICCV 2023 (code: OpenGVLab/unmasked_teacher, multi_modality/models/umt.py,
        criterions.py); Thoker & Van Droogenbroeck, "Advancing Video-Text Pretraining with
        Multi-View Captions" (MVC), 2026 (VTC temperature 0.07, VTM with hard negatives,
        MLM ratio 0.5, equal weights).

    Relations:
        The sum of ``VideoTextContrastiveLoss``, ``VideoTextMatchingLoss`` and
        ``MaskedLanguageModelingLoss`` (same functions, same defaults). UMT's fourth term,
        unmasked token alignment with a CLIP teacher, belongs to its stage-1 video training
        and is not here (MVC starts stage 2 from a SMILE video encoder). The temperature is
        learnable from 0.07 and clamped to ``temperature_range`` (UMT's ``temp``); the
        matching head and the MLM head are the model's (``match_logits``, ``mlm_logits``).

    Example:
        >>> import torch
        >>> from types import SimpleNamespace
        >>> from vlr_plugins.losses import VideoTextPretrainingLoss
        >>> words, match_head, mlm_head = (torch.nn.Embedding(30, 8), torch.nn.Linear(8, 2),
        ...                                torch.nn.Linear(8, 30))
        >>> model = SimpleNamespace(                     # stand-ins for BERT's layers
        ...     encode_text_tokens=lambda ids, mask, views: words(ids),
        ...     fuse=lambda t, tm, v, vm: t + v.mean(1, keepdim=True),
        ...     match_logits=match_head, mlm_logits=mlm_head)
        >>> ids = torch.randint(4, 30, (4, 6))            # 2 videos x (summary, detailed)
        >>> loss_fn = VideoTextPretrainingLoss(vocab_size=30, mask_id=3, special_ids=[0, 1, 2])
        >>> out = loss_fn(model, torch.randn(2, 4), torch.randn(4, 4),
        ...               text_owner=torch.tensor([0, 1, 0, 1]),
        ...               text_view=torch.tensor([0, 0, 1, 1]),
        ...               video_tokens=torch.randn(2, 5, 8), text_hidden=words(ids),
        ...               input_ids=ids, attention_mask=torch.ones_like(ids))
        >>> [key for key in out if "_" not in key]     # also vtc_summary, vtc_detailed, ...
        ['loss', 'vtc', 'vtm', 'mlm']
        >>> out["loss"].backward()
    """

    def __init__(
        self,
        vocab_size: int,
        mask_id: int,
        special_ids: Sequence[int],
        views: Sequence[str] = MVC_VIEWS,
        matching_views: Sequence[str] | None = None,
        mlm_views: Sequence[str] | None = None,
        vtc_weight: float = 1.0,
        vtm_weight: float = 1.0,
        mlm_weight: float = 1.0,
        mlm_ratio: float = MVC_MLM_RATIO,
        hard_negatives: bool = True,
        temperature: float = UMT_TEMPERATURE,
        learnable_temperature: bool = True,
        temperature_range: Sequence[float] = (0.001, 0.5),
        gather: bool | None = None,
    ) -> None:
        super().__init__(temperature, learnable_temperature, temperature_range, gather)
        where = type(self).__name__
        self.views = _check_views(where, views)
        self.matching_views = self._subset(where, "matching_views", matching_views)
        self.mlm_views = self._subset(where, "mlm_views", mlm_views)
        self.weights = {"vtc": float(vtc_weight), "vtm": float(vtm_weight), "mlm": float(mlm_weight)}
        for term, w in self.weights.items():
            if not w >= 0:
                raise ValueError(f"{where}: {term}_weight must be >= 0; found {w!r}")
        if not 0 < mlm_ratio <= 1:
            raise ValueError(f"{where}: mlm_ratio must be in (0, 1]; found {mlm_ratio!r}")
        if not 0 <= mask_id < vocab_size:
            raise ValueError(f"{where}: mask_id must be a token of the vocabulary: expected "
                             f"0 <= mask_id < vocab_size = {vocab_size}, found {mask_id}")
        self.vocab_size = int(vocab_size)
        self.mask_id = int(mask_id)
        self.special_ids = sorted({int(i) for i in special_ids})
        self.mlm_ratio = float(mlm_ratio)
        self.hard_negatives = bool(hard_negatives)

    def _subset(self, where: str, name: str, subset: Sequence[str] | None) -> tuple[str, ...]:
        if subset is None:
            return self.views
        chosen = (subset,) if isinstance(subset, str) else tuple(subset)
        unknown = [v for v in chosen if v not in self.views]
        if unknown or not chosen:
            raise ValueError(f"{where}: {name} must be a non-empty subset of views {self.views}; "
                             f"found {tuple(chosen)}")
        return tuple(v for v in self.views if v in chosen)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, **kwargs: Any) -> VideoTextPretrainingLoss:
        """Take ``vocab_size``, ``mask_id`` and ``special_ids`` from a Hugging Face tokenizer
        (``len(tokenizer)``, ``mask_token_id``, ``all_special_ids``); ``kwargs`` as
        ``__init__``."""
        if getattr(tokenizer, "mask_token_id", None) is None:
            raise ValueError(f"{cls.__name__}.from_tokenizer: {type(tokenizer).__name__} has no "
                             f"mask token (mask_token_id is None); MLM needs one")
        return cls(len(tokenizer), tokenizer.mask_token_id, tokenizer.all_special_ids, **kwargs)

    def forward(
        self,
        model: VideoTextFusion,
        video_emb: Tensor,
        text_emb: Tensor,
        text_owner: Tensor,
        text_view: Tensor | None = None,
        *,
        video_tokens: Tensor,
        text_hidden: Tensor,
        input_ids: Tensor,
        attention_mask: Tensor,
        video_mask: Tensor | None = None,
        temperature: float | Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> dict[str, Tensor]:
        where = type(self).__name__
        needs = (("fuse", "match_logits") if self.weights["vtm"] else ()) + (
            ("encode_text_tokens", "fuse", "mlm_logits") if self.weights["mlm"] else ())
        check_fusion_model(model, tuple(dict.fromkeys(needs)), where)
        rows = dict(zip(self.views, view_rows(text_view, text_owner, video_emb.shape[0],
                                              self.views, where)))
        if tuple(input_ids.shape) != tuple(attention_mask.shape) or tuple(
                text_hidden.shape[:2]) != tuple(input_ids.shape):
            raise ValueError(f"{where}: input_ids, attention_mask and text_hidden must share "
                             f"(N, L); found {tuple(input_ids.shape)}, "
                             f"{tuple(attention_mask.shape)}, {tuple(text_hidden.shape)}")
        t = self._temperature(temperature)
        per_view: dict[str, list[Tensor]] = {term: [] for term in TERMS}
        out: dict[str, Tensor] = {}
        zero = video_emb.new_zeros(())

        for view, r in rows.items():
            ids, mask, hidden = _trim_padding(input_ids[r], attention_mask[r], text_hidden[r])
            owner = text_owner[r]
            if self.weights["vtc"]:
                term = video_text_contrastive(video_emb, text_emb[r], owner, temperature=t,
                                              gather=self.gather)
                per_view["vtc"].append(term)
                out[f"vtc_{view}"] = term.detach()
            if self.weights["vtm"] and view in self.matching_views:
                term = video_text_matching(
                    model, video_emb, text_emb[r], owner, video_tokens, hidden, mask,
                    video_mask=video_mask, temperature=t, hard_negatives=self.hard_negatives,
                    generator=generator, gather=self.gather)
                per_view["vtm"].append(term)
                out[f"vtm_{view}"] = term.detach()
            if self.weights["mlm"] and view in self.mlm_views:
                term = masked_language_modeling(
                    model, ids, mask, video_tokens, owner, special_ids=self.special_ids,
                    mask_id=self.mask_id, vocab_size=self.vocab_size, video_mask=video_mask,
                    view_ids=None if text_view is None else text_view[r], ratio=self.mlm_ratio,
                    generator=generator)
                per_view["mlm"].append(term)
                out[f"mlm_{view}"] = term.detach()

        total = zero
        for term in TERMS:
            value = torch.stack(per_view[term]).mean() if per_view[term] else zero
            out[term] = value
            total = total + self.weights[term] * value
        return {"loss": total, **out}

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "vocab_size": self.vocab_size,
            "mask_id": self.mask_id,
            "special_ids": list(self.special_ids),
            "views": list(self.views),
            "matching_views": list(self.matching_views),
            "mlm_views": list(self.mlm_views),
            "vtc_weight": self.weights["vtc"],
            "vtm_weight": self.weights["vtm"],
            "mlm_weight": self.weights["mlm"],
            "mlm_ratio": self.mlm_ratio,
            "hard_negatives": self.hard_negatives,
            **_without_infonce_options(super().get_config_dict()),
        }


def _trim_padding(input_ids: Tensor, attention_mask: Tensor,
                  hidden: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Drop the trailing columns that are padding in every row."""
    used = attention_mask.bool().any(0).nonzero()
    length = int(used.max()) + 1 if used.numel() else input_ids.shape[1]
    return input_ids[:, :length], attention_mask[:, :length], hidden[:, :length]
