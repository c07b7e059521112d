"""The functional core of the InfoNCE losses (torch's ``nn.functional`` convention):
:func:`multi_positive_infonce`, symmetric image-text InfoNCE with any number of captions
per image and hard negatives; :mod:`vlr_plugins.losses.infonce` wraps it in modules.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from vlr_plugins.losses._gather import gather_owners, gather_rows_with_grad, should_gather

__all__ = ["multi_positive_infonce", "VARIANTS", "HARD_NEGATIVE_SCOPES"]

VARIANTS = ("mean_log", "log_sum")
HARD_NEGATIVE_SCOPES = ("batch", "own")

_WHERE = "multi_positive_infonce"


def multi_positive_infonce(
    image_emb: Tensor,
    text_emb: Tensor,
    text_owner: Tensor,
    *,
    temperature: float | Tensor = 0.07,
    neg_emb: Tensor | None = None,
    neg_owner: Tensor | None = None,
    variant: Literal["mean_log", "log_sum"] = "mean_log",
    hard_negative_scope: Literal["batch", "own"] = "batch",
    gather: bool | None = None,
    label_smoothing: float = 0.0,
) -> Tensor:
    """Symmetric contrastive loss between B images and N >= B captions.

    Expects:
        image_emb: ``(B, D)`` image embeddings, one row per distinct image.
        text_emb: ``(N, D)`` caption embeddings.
        text_owner: ``(N,)`` integer, the image ``0..B-1`` each caption describes;
            every image needs at least one caption (any number, e.g. ``[0, 0, 1, 2, 2, 2]``).
        temperature: a positive float or a 0-d tensor (learnable).
        neg_emb: ``(M, D)`` optional hard-negative captions; they only enlarge the
            image-to-text denominators (never queries, never positives).
        neg_owner: ``(M,)`` integer, the image each negative was written for; needed
            by ``hard_negative_scope="own"``.
        hard_negative_scope: ``"batch"`` every image competes with every negative
            (NegCLIP); ``"own"`` image ``i`` only sees negatives with ``neg_owner == i``.
        gather: gather all ranks' rows (with gradient) and compute the loss on the
            global batch; ``None`` = when ``torch.distributed`` runs with > 1 process.
            All ranks must agree on whether ``neg_emb`` / ``neg_owner`` are given.
        label_smoothing: ``eps`` in ``[0, 1]``; every query's target keeps ``1 - eps`` of
            its weight and spreads ``eps`` evenly over the candidates it is scored
            against, as ``F.cross_entropy(..., label_smoothing=eps)`` (formula below).

    Formula (embeddings L2-normalised, ``s(a, b) = cos(a, b) / temperature``,
    ``P(i)`` the captions of image ``i``, ``p_i(j)`` the softmax of ``s(i, .)`` over
    all captions and the negatives image ``i`` sees)::

        i2t_mean_log(i) = -1/|P(i)| * sum_{j in P(i)} log p_i(j)
        i2t_log_sum(i)  = -log sum_{j in P(i)} p_i(j)
        t2i(j)          = -log softmax_k s(j, k) at k = owner(j)     (over the B images)
        loss = (mean_i i2t(i) + mean_j t2i(j)) / 2

    With ``label_smoothing = eps > 0``, ``C(i)`` the ``K_i`` candidates image ``i`` is
    scored against (all N captions and the negatives it sees)::

        i2t(i) <- (1 - eps) * i2t(i) + eps * mean_{k in C(i)} -log p_i(k)
        t2i(j) <- (1 - eps) * t2i(j) + eps * mean_{k < B} -log softmax_k s(j, k)

    With one caption per image each term is ``F.cross_entropy(logits, target,
    label_smoothing=eps)``. With several captions the smoothed target of image ``i`` is
    ``(1 - eps) * q_i + eps / K_i`` on every candidate, ``q_i`` the variant's target:
    ``1/|P(i)|`` on each positive for ``mean_log`` (BLIP's soft targets); for ``log_sum``
    the positives count as one merged class (their summed probability). The ``eps``
    share reaches every candidate, positives included; an ``"own"``-scope negative of
    another image is no candidate of image ``i`` and gets none.

    Reference:
        Radford et al., "Learning Transferable Visual Models From Natural Language
        Supervision" (CLIP), 2021; Miech et al., "End-to-End Learning of Visual
        Representations from Uncurated Instructional Videos" (MIL-NCE, ``log_sum``),
        2020; Li et al., "BLIP", 2022 (soft targets ``pos / pos.sum(1)`` = ``mean_log``);
        Yuksekgonul et al., "When and Why Vision-Language Models Behave like
        Bags-of-Words" (NegCLIP hard negatives), 2023.

    Relations:
        With one caption per image and no negatives both variants equal open_clip's
        ``ClipLoss`` with ``logit_scale = 1 / temperature``. ``mean_log`` pulls every
        caption towards its image; ``log_sum`` is satisfied once any one caption
        matches. Modules: ``InfoNCELoss``, ``MultiPositiveInfoNCELoss``,
        ``HardNegativeInfoNCELoss``. In a distributed run every rank returns the same
        global loss (open_clip's ``local_loss=False``).

    Example:
        >>> import torch
        >>> from vlr_plugins.losses import multi_positive_infonce
        >>> images, texts = torch.randn(3, 8), torch.randn(6, 8)
        >>> owner = torch.tensor([0, 0, 1, 2, 2, 2])
        >>> loss = multi_positive_infonce(images, texts, owner, temperature=0.05)
        >>> loss.shape
        torch.Size([])
    """
    _check_arguments(
        image_emb, text_emb, text_owner, temperature, neg_emb, neg_owner, variant,
        hard_negative_scope, label_smoothing,
    )
    image = F.normalize(image_emb, dim=-1)
    text = F.normalize(text_emb, dim=-1)
    owner = text_owner.long()
    neg = F.normalize(neg_emb, dim=-1) if neg_emb is not None else None
    own = neg_owner.long() if neg is not None and hard_negative_scope == "own" else None
    if isinstance(temperature, Tensor):
        temperature = temperature.reshape(())

    if should_gather(gather):
        num_local_images = image.shape[0]
        image = gather_rows_with_grad(image)
        text = gather_rows_with_grad(text)
        owner, _ = gather_owners(owner, num_local_images)
        if neg is not None:
            neg = gather_rows_with_grad(neg)
        if own is not None:
            own, _ = gather_owners(own, num_local_images)

    return _symmetric_loss(image, text, owner, temperature, neg, own, variant, label_smoothing)


def _symmetric_loss(
    image: Tensor,
    text: Tensor,
    owner: Tensor,
    temperature: float | Tensor,
    neg: Tensor | None,
    neg_owner: Tensor | None,
    variant: str,
    label_smoothing: float = 0.0,
) -> Tensor:
    """The loss on normalised, already gathered rows; ``neg_owner`` given = scope "own"."""
    num_images, num_texts = image.shape[0], text.shape[0]
    image_ids = torch.arange(num_images, device=image.device).unsqueeze(1)
    logits = image @ text.T / temperature  # (B, N)
    positive = owner.unsqueeze(0) == image_ids  # (B, N)

    t2i = F.cross_entropy(logits.T, owner, label_smoothing=label_smoothing)

    i2t_logits = logits
    seen = None  # (B, N + M) the candidates of each image, when some are hidden from it
    if neg is not None:
        neg_logits = image @ neg.T / temperature  # (B, M)
        if neg_owner is not None:
            own = neg_owner.unsqueeze(0) == image_ids
            neg_logits = neg_logits.masked_fill(~own, float("-inf"))
            seen = torch.cat([torch.ones_like(positive), own], dim=1)
        i2t_logits = torch.cat([logits, neg_logits], dim=1)
    # the negatives are only in the normaliser; every row keeps >= 1 finite positive
    all_log_prob = F.log_softmax(i2t_logits, dim=1)
    log_prob = all_log_prob[:, :num_texts]
    if variant == "mean_log":
        per_image = -torch.where(positive, log_prob, 0.0).sum(1) / positive.sum(1)
    else:
        per_image = -torch.logsumexp(log_prob.masked_fill(~positive, float("-inf")), dim=1)
    if label_smoothing:
        if seen is None:
            uniform = -all_log_prob.mean(1)
        else:
            uniform = -torch.where(seen, all_log_prob, 0.0).sum(1) / seen.sum(1)
        per_image = (1 - label_smoothing) * per_image + label_smoothing * uniform
    return (per_image.mean() + t2i) / 2


def _check_temperature(where: str, temperature: float | Tensor) -> None:
    if isinstance(temperature, Tensor):
        if temperature.numel() != 1:
            raise ValueError(
                f"{where}: temperature must be a scalar; found shape {tuple(temperature.shape)}"
            )
    elif not temperature > 0:
        raise ValueError(f"{where}: temperature must be > 0; found {temperature!r}")


def _check_label_smoothing(where: str, label_smoothing: float) -> None:
    """``label_smoothing`` must be a number in ``[0, 1]`` (torch's ``cross_entropy`` range)."""
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)) or not (
        0.0 <= label_smoothing <= 1.0
    ):
        raise ValueError(f"{where}: label_smoothing must be a number in [0, 1]; found {label_smoothing!r}")


def _check_rows(name: str, x: Tensor, dim: int | None) -> None:
    if x.ndim != 2:
        raise ValueError(f"{_WHERE}: {name} must be 2-D (rows, dim); found shape {tuple(x.shape)}")
    if dim is not None and x.shape[1] != dim:
        raise ValueError(
            f"{_WHERE}: {name} must have the embedding size of image_emb: expected "
            f"(*, {dim}), found {tuple(x.shape)}"
        )


def _check_owner(name: str, owner: Tensor, rows_name: str, num_rows: int, num_images: int) -> None:
    if owner.dtype.is_floating_point or owner.dtype.is_complex or owner.dtype == torch.bool:
        raise ValueError(f"{_WHERE}: {name} must hold integer image indices; found {owner.dtype}")
    if tuple(owner.shape) != (num_rows,):
        raise ValueError(
            f"{_WHERE}: {name} must have one entry per row of {rows_name}: expected shape "
            f"({num_rows},), found {tuple(owner.shape)}"
        )
    bad = (owner < 0) | (owner >= num_images)
    if bool(bad.any()):
        at = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"{_WHERE}: {name}[{at}] = {int(owner[at])} is out of range: expected "
            f"0 <= owner < {num_images} (the number of images)"
        )


def _check_arguments(
    image_emb: Tensor,
    text_emb: Tensor,
    text_owner: Tensor,
    temperature: float | Tensor,
    neg_emb: Tensor | None,
    neg_owner: Tensor | None,
    variant: str,
    hard_negative_scope: str,
    label_smoothing: float = 0.0,
) -> None:
    _check_label_smoothing(_WHERE, label_smoothing)
    if variant not in VARIANTS:
        raise ValueError(f"{_WHERE}: variant must be one of {VARIANTS}; found {variant!r}")
    if hard_negative_scope not in HARD_NEGATIVE_SCOPES:
        raise ValueError(
            f"{_WHERE}: hard_negative_scope must be one of {HARD_NEGATIVE_SCOPES}; "
            f"found {hard_negative_scope!r}"
        )
    _check_temperature(_WHERE, temperature)

    _check_rows("image_emb", image_emb, None)
    num_images, dim = image_emb.shape
    if num_images == 0:
        raise ValueError(f"{_WHERE}: image_emb needs at least one image; found shape (0, {dim})")
    _check_rows("text_emb", text_emb, dim)
    _check_owner("text_owner", text_owner, "text_emb", text_emb.shape[0], num_images)
    captions = torch.bincount(text_owner.long(), minlength=num_images)
    if bool((captions == 0).any()):
        missing = (captions == 0).nonzero().flatten().tolist()
        raise ValueError(
            f"{_WHERE}: every image needs at least one caption in text_owner; images "
            f"{missing[:10]}{' ...' if len(missing) > 10 else ''} have none"
        )

    if neg_emb is None:
        if neg_owner is not None:
            raise ValueError(f"{_WHERE}: neg_owner was given without neg_emb")
        return
    _check_rows("neg_emb", neg_emb, dim)
    if neg_owner is not None:
        _check_owner("neg_owner", neg_owner, "neg_emb", neg_emb.shape[0], num_images)
    elif hard_negative_scope == "own":
        raise ValueError(
            f"{_WHERE}: hard_negative_scope='own' needs neg_owner (the image each "
            f"negative was written for); found neg_owner=None"
        )
