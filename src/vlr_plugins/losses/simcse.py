"""Supervised SimCSE's contrastive loss, one-directional: CaRe's stage-II objective (eq. 4).

The image-text losses of :mod:`vlr_plugins.losses.functional` are symmetric (the mean of
an image-to-text and a text-to-image term); SimCSE, E5-V and CaRe use only the first
direction, sentence to (positives + hard negatives). :func:`supervised_simcse` is that
direction; with the anchors as "images" it equals the image-to-text half of
:func:`~vlr_plugins.losses.multi_positive_infonce` with ``hard_negative_scope="batch"``
(tests/losses/test_simcse.py checks this).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlr_plugins.losses._gather import gather_rows_with_grad, should_gather
from vlr_plugins.losses.functional import _check_temperature
from vlr_plugins.registry import LOSSES

__all__ = ["supervised_simcse", "SupervisedSimCSELoss"]

_WHERE = "supervised_simcse"


def _check(anchor: Tensor, positive: Tensor, negative: Tensor | None) -> None:
    if anchor.ndim != 2 or anchor.shape[0] == 0:
        raise ValueError(f"{_WHERE}: anchor_emb must be (N, D) with N >= 1; found {tuple(anchor.shape)}")
    if positive.shape != anchor.shape:
        raise ValueError(f"{_WHERE}: positive_emb must match anchor_emb, one positive per anchor: expected "
                         f"{tuple(anchor.shape)}, found {tuple(positive.shape)}")
    if negative is not None and negative.shape != anchor.shape:
        raise ValueError(f"{_WHERE}: negative_emb must match anchor_emb, one hard negative per anchor: "
                         f"expected {tuple(anchor.shape)}, found {tuple(negative.shape)}")


def _at_least_fp32(x: Tensor) -> Tensor:
    """bf16 / fp16 rows in float32, as CaReBench computes its similarities."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def supervised_simcse(
    anchor_emb: Tensor,
    positive_emb: Tensor,
    negative_emb: Tensor | None = None,
    *,
    temperature: float | Tensor = 0.05,
    gather: bool | None = None,
) -> Tensor:
    """Cross-entropy of each sentence over every positive and hard negative of the batch.

    Expects:
        anchor_emb: ``(N, D)`` the sentences ``f_i``.
        positive_emb: ``(N, D)`` their positives ``f_i+`` (row i belongs to anchor i).
        negative_emb: ``(N, D)`` optional hard negatives ``f_i-`` (row i written for anchor i).
        temperature: tau, a positive float or a 0-d tensor.
        gather: compute on the global batch of all ranks (rows gathered with gradient);
            ``None`` = when ``torch.distributed`` runs with more than one process.

    Formula (CaReBench eq. 4; SimCSE eq. 5), over the N anchors of the (global) batch::

        loss_i = -log  e^{cos(f_i, f_i+)/tau}
                       / sum_j ( e^{cos(f_i, f_j+)/tau} + e^{cos(f_i, f_j-)/tau} )
        loss   = mean_i loss_i

    Reference: Gao et al., "SimCSE: Simple Contrastive Learning of Sentence Embeddings",
    2021; Jiang et al., "E5-V", 2024; Xu et al., "CaReBench" (CaRe stage II), 2025.

    Relations: the image-to-text term of ``multi_positive_infonce(anchor, positive,
    arange(N), neg_emb=negative, hard_negative_scope="batch")``, without its
    text-to-image term. E5-V's and CaReBench's trainers gather rows without gradient and
    put the local rows back, so each rank's gradient reaches only its own rows; here rows
    are gathered with gradient (summed over ranks), so after DDP's averaging the step
    follows the full gradient of the global loss (theirs is that divided by the world size).

    Example:
        >>> import torch
        >>> from vlr_plugins.losses import supervised_simcse
        >>> a, p, n = torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 8)
        >>> supervised_simcse(a, p, n, temperature=0.05).shape
        torch.Size([])
    """
    _check(anchor_emb, positive_emb, negative_emb)
    _check_temperature(_WHERE, temperature)
    if isinstance(temperature, Tensor):
        temperature = temperature.reshape(())
    anchor = F.normalize(_at_least_fp32(anchor_emb), dim=-1)
    candidates = [F.normalize(_at_least_fp32(positive_emb), dim=-1)]
    if negative_emb is not None:
        candidates.append(F.normalize(_at_least_fp32(negative_emb), dim=-1))
    if should_gather(gather):
        anchor = gather_rows_with_grad(anchor)
        candidates = [gather_rows_with_grad(c) for c in candidates]
    logits = anchor @ torch.cat(candidates).T / temperature  # (N, N) or (N, 2N)
    target = torch.arange(anchor.shape[0], device=anchor.device)
    return F.cross_entropy(logits, target)


@LOSSES.register
class SupervisedSimCSELoss(nn.Module):
    """Supervised SimCSE / CaRe eq. 4: each sentence against all positives and hard negatives.

    Expects ``anchor_emb`` ``(N, D)``, ``positive_emb`` ``(N, D)`` and optionally
    ``negative_emb`` ``(N, D)`` (row i of each belongs to sentence i); L2-normalised
    inside. The keyword ``temperature`` sets this call's tau (``None``: the module's).

    Formula: ``CE([cos(f_i, f_j+) | cos(f_i, f_j-)]_j / tau, target i)``, averaged over
    the global batch (:func:`~vlr_plugins.losses.supervised_simcse`).

    Reference: Gao et al., "SimCSE", 2021; CaReBench (CaRe stage II, tau = 0.05), 2025.

    Relations: one-directional, unlike the symmetric ``HardNegativeInfoNCELoss``, whose
    image-to-text half it equals with the anchors as images and ``hard_negative_scope=
    "batch"``. Without ``negative_emb`` it is unsupervised SimCSE's in-batch loss.

    Example:
        >>> import torch
        >>> from vlr_plugins.losses import SupervisedSimCSELoss
        >>> loss_fn = SupervisedSimCSELoss(temperature=0.05)
        >>> loss_fn(torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 8)).shape
        torch.Size([])
    """

    def __init__(self, temperature: float = 0.05, gather: bool | None = None) -> None:
        super().__init__()
        if not temperature > 0:
            raise ValueError(f"SupervisedSimCSELoss: temperature must be > 0; found {temperature!r}")
        self.temperature = float(temperature)
        self.gather = gather

    def forward(self, anchor_emb: Tensor, positive_emb: Tensor, negative_emb: Tensor | None = None, *,
                temperature: float | Tensor | None = None) -> Tensor:
        return supervised_simcse(anchor_emb, positive_emb, negative_emb,
                                 temperature=self.temperature if temperature is None else temperature,
                                 gather=self.gather)

    def get_config_dict(self) -> dict[str, Any]:
        """Hyperparameters for the model card; ``SupervisedSimCSELoss(**config)`` rebuilds it."""
        return {"temperature": self.temperature, "gather": self.gather}

    def extra_repr(self) -> str:
        return f"temperature={self.temperature}, gather={self.gather}"
