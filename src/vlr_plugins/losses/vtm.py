"""Video-text matching (VTM) with hard negatives: a binary matched / not-matched head on the
fusion layers' [CLS] state, for every positive (caption, video) pair, one hard-negative video
per caption and one hard-negative caption per pair's video.

Negatives are drawn from the global batch in a distributed run; only the drawn rows' tokens
travel (:func:`~vlr_plugins.losses._gather.gather_rows_at`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlr_plugins.losses._gather import (
    gather_owners,
    gather_rows_at,
    gather_rows_with_grad,
    gather_sizes,
    should_gather,
)
from vlr_plugins.losses.functional import _check_temperature
from vlr_plugins.losses.video_text_fusion import VideoTextFusion, check_fusion_model
from vlr_plugins.registry import LOSSES

__all__ = ["sample_hard_negatives", "video_text_matching", "VideoTextMatchingLoss"]

_WHERE = "video_text_matching"


def sample_hard_negatives(
    text_to_video: Tensor,
    text_owner: Tensor,
    *,
    hard: bool = True,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Draw one negative video per caption and one negative caption per caption's video.

    Expects:
        text_to_video: ``(N, B)`` similarity logits of every caption to every video (cosine /
            temperature); no gradient is needed (the draw is not differentiable).
        text_owner: ``(N,)`` integer, the video of each caption.
        hard: ``True`` draws from the softmax of the similarities (hard negatives);
            ``False`` uniformly (UMT's ``vtm_hard_neg=False``).
        generator: a ``torch.Generator`` on the device of ``text_to_video`` (seeded draws).

    Returns:
        ``(negative_video, negative_text)``, both ``(N,)`` long: for caption ``j``,
        ``negative_video[j] ~ softmax_k s(j, k)`` over the videos ``k != owner(j)``, and
        ``negative_text[j] ~ softmax_m s(m, owner(j))`` over the captions ``m`` with
        ``owner(m) != owner(j)`` (a negative for caption ``j``'s video). A negative is never
        the caption's own video nor any caption of it, however many captions a video has.

    Formula: ALBEF / UMT fill the softmax's entries of the same video with 0 and let
    ``torch.multinomial`` renormalise; here those entries are ``-inf`` before the softmax,
    the same distribution without its underflow (a row whose positives dominate would
    otherwise be all zeros).

    Reference: Li et al., "Align before Fuse" (ALBEF), NeurIPS 2021 (hard negatives for
    ITM); UMT, multi_modality/models/criterions.py (``VTC_VTM_Loss.vtm_loss``).

    Example:
        >>> import torch
        >>> from vlr_plugins.losses import sample_hard_negatives
        >>> owner = torch.tensor([0, 0, 1, 2])           # video 0 has two captions
        >>> videos, texts = sample_hard_negatives(torch.randn(4, 3), owner,
        ...                                       generator=torch.Generator().manual_seed(0))
        >>> bool((videos != owner).all()), bool((owner[texts] != owner).all())
        (True, True)
    """
    where = "sample_hard_negatives"
    if text_to_video.ndim != 2:
        raise ValueError(f"{where}: text_to_video must be (N captions, B videos); found shape "
                         f"{tuple(text_to_video.shape)}")
    num_texts, num_videos = text_to_video.shape
    owner = text_owner.long()
    if tuple(owner.shape) != (num_texts,):
        raise ValueError(f"{where}: text_owner must have one entry per caption: expected shape "
                         f"({num_texts},), found {tuple(owner.shape)}")
    sim = text_to_video.detach()
    same_video = owner.unsqueeze(1) == torch.arange(num_videos, device=sim.device)  # (N, B)
    same_text = owner.unsqueeze(1) == owner.unsqueeze(0)  # (N, N): m shares j's video
    if not hard:
        sim = torch.zeros_like(sim)
    if bool(same_video.all(1).any()):
        raise ValueError(f"{where}: a caption needs another video to be its negative; the batch "
                         f"has {num_videos} video(s) (VTM needs at least 2 videos)")
    if bool(same_text.all(1).any()):
        j = int(same_text.all(1).nonzero()[0, 0])
        raise ValueError(f"{where}: video {int(owner[j])} needs a caption of another video to "
                         f"be its negative; every caption of the batch belongs to it")
    video_logits = sim.masked_fill(same_video, float("-inf"))
    # video owner(j)'s similarities to every caption: column owner(j) of sim
    text_logits = sim.T[owner].masked_fill(same_text, float("-inf"))  # (N, N)
    negative_video = torch.multinomial(video_logits.softmax(dim=1), 1, generator=generator)
    negative_text = torch.multinomial(text_logits.softmax(dim=1), 1, generator=generator)
    return negative_video.squeeze(1), negative_text.squeeze(1)


def video_text_matching(
    model: VideoTextFusion,
    video_emb: Tensor,
    text_emb: Tensor,
    text_owner: Tensor,
    video_tokens: Tensor,
    text_hidden: Tensor,
    text_mask: Tensor,
    *,
    video_mask: Tensor | None = None,
    temperature: float | Tensor = 0.07,
    hard_negatives: bool = True,
    generator: torch.Generator | None = None,
    gather: bool | None = None,
) -> Tensor:
    """Binary cross-entropy of a matching head over positive pairs and sampled hard negatives.

    Expects:
        model: implements ``fuse`` and ``match_logits`` of
            :class:`~vlr_plugins.losses.VideoTextFusion`.
        video_emb: ``(B, D)``, text_emb: ``(N, D)``: the contrastive embeddings; only their
            similarities ``cos / temperature`` are used, to draw negatives (no gradient).
        text_owner: ``(N,)`` integer, the video ``0..B-1`` of each caption (a video may have
            several captions; at least 2 videos in the (global) batch).
        video_tokens: ``(B, Nv, C)`` the video tower's tokens (the fusion layers' keys).
        text_hidden: ``(N, L, H)`` the text layers' output; text_mask: ``(N, L)`` 1 = token.
        video_mask: ``(B, Nv)`` 1 = attend; ``None`` = all tokens (UMT).
        temperature: of the similarities the negatives are drawn from (VTC's, as in UMT).
        hard_negatives: draw negatives from the similarity softmax (``True``) or uniformly.
        generator: seeds the draws (on the embeddings' device). With the same seed on every
            rank a distributed run draws what one process draws on the concatenated batch.
        gather: draw negatives from the global batch (``None`` = when ``torch.distributed``
            runs with > 1 process); ``False`` = each rank's own batch (UMT).

    Formula (3N pairs fused: every caption with its video, label 1; with its negative video,
    label 0; its video with a negative caption, label 0; negatives from
    :func:`sample_hard_negatives`)::

        z = match_logits(fuse(text, video)[:, 0])                     # (3N, 2)
        loss = mean over the 3N pairs of CE(z, label)

    In a distributed run every rank fuses its own captions' 3N pairs (the negatives fetched
    from the ranks that hold them) and returns the global mean over all ranks' pairs; its
    gradient is ``world_size`` times that of its own pairs' share, the scaling of the
    gathered contrastive losses, so DDP's averaging yields the global loss's gradient.

    Reference:
        Li et al., "Align before Fuse" (ALBEF), NeurIPS 2021 (ITM with hard negatives);
        UMT, multi_modality/models/criterions.py (``VTC_VTM_Loss.vtm_loss``); Li et al.,
        "BLIP", ICML 2022, models/blip_retrieval.py (``negative_all_rank``: negatives from
        every rank).

    Relations:
        UMT's ``vtm_loss`` (the same three groups of pairs, the same labels) with negatives
        drawn on each rank's local batch, like ``gather=False`` here; the global draw is
        BLIP's ``negative_all_rank=True``, without gathering every rank's tokens. Module:
        ``VideoTextMatchingLoss``; part of ``VideoTextPretrainingLoss``.

    Example:
        >>> import torch
        >>> from types import SimpleNamespace
        >>> from vlr_plugins.losses import video_text_matching
        >>> head = torch.nn.Linear(8, 2)
        >>> model = SimpleNamespace(                     # a stand-in for the fusion layers
        ...     fuse=lambda t, tm, v, vm: t + v.mean(1, keepdim=True), match_logits=head)
        >>> owner = torch.tensor([0, 1, 2])
        >>> loss = video_text_matching(
        ...     model, torch.randn(3, 4), torch.randn(3, 4), owner,
        ...     video_tokens=torch.randn(3, 5, 8), text_hidden=torch.randn(3, 6, 8),
        ...     text_mask=torch.ones(3, 6, dtype=torch.long))
        >>> loss.backward()
        >>> head.weight.grad is not None
        True
    """
    check_fusion_model(model, ("fuse", "match_logits"), _WHERE)
    video_mask = _check_arguments(video_emb, text_emb, text_owner, video_tokens, text_hidden,
                                  text_mask, video_mask, temperature)
    owner = text_owner.long()
    num_texts = owner.shape[0]
    gathering = should_gather(gather)

    with torch.no_grad():
        video = F.normalize(video_emb.detach(), dim=-1)
        text = F.normalize(text_emb.detach(), dim=-1)
        global_owner, first_text = owner, 0
        if gathering:
            text_sizes = gather_sizes(num_texts, text.device)
            first_text = sum(text_sizes[: _rank(len(text_sizes))])
            global_owner, _ = gather_owners(owner, video.shape[0])
            video, text = gather_rows_with_grad(video), gather_rows_with_grad(text)
        t = temperature.detach().reshape(()) if isinstance(temperature, Tensor) else temperature
        negative_video, negative_text = sample_hard_negatives(
            text @ video.T / t, global_owner, hard=hard_negatives, generator=generator)
        negative_video = negative_video[first_text : first_text + num_texts]
        negative_text = negative_text[first_text : first_text + num_texts]

    if gathering:
        text_hidden, text_mask = _pad_to_global_length(text_hidden, text_mask)
        rows_at = gather_rows_at
    else:
        def rows_at(x: Tensor, index: Tensor) -> Tensor:
            return x[index]

    own_video, own_video_mask = video_tokens[owner], video_mask[owner]
    fused = model.fuse(
        torch.cat([text_hidden, text_hidden, rows_at(text_hidden, negative_text)]),
        torch.cat([text_mask, text_mask, rows_at(text_mask, negative_text)]),
        torch.cat([own_video, rows_at(video_tokens, negative_video), own_video]),
        torch.cat([own_video_mask, rows_at(video_mask, negative_video), own_video_mask]),
    )
    logits = model.match_logits(fused[:, 0])
    labels = torch.zeros(3 * num_texts, dtype=torch.long, device=logits.device)
    labels[:num_texts] = 1
    local_sum = F.cross_entropy(logits, labels, reduction="sum")
    if not gathering:
        return local_sum / labels.numel()
    return _global_mean(local_sum, labels.numel())


def _rank(world_size: int) -> int:
    if world_size == 1:
        return 0
    import torch.distributed as dist

    return dist.get_rank()


def _pad_to_global_length(hidden: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Right-pad ``(n, L, H)`` / ``(n, L)`` to the longest ``L`` of all ranks (mask 0), so
    that rows can travel between ranks."""
    longest = max(gather_sizes(hidden.shape[1], hidden.device))
    extra = longest - hidden.shape[1]
    if extra == 0:
        return hidden, mask
    return F.pad(hidden, (0, 0, 0, extra)), F.pad(mask, (0, extra))


def _global_mean(local_sum: Tensor, local_count: int) -> Tensor:
    """The mean over every rank's terms, with the gradient of ``world_size`` times this
    rank's share (see :func:`video_text_matching`)."""
    both = torch.stack([local_sum.detach(), local_sum.new_tensor(float(local_count))])
    everyone = gather_rows_with_grad(both.unsqueeze(0))
    total, count = everyone.sum(0)
    share = local_sum * (everyone.shape[0] / count)
    return share + (total / count - share).detach()


def _check_arguments(
    video_emb: Tensor,
    text_emb: Tensor,
    text_owner: Tensor,
    video_tokens: Tensor,
    text_hidden: Tensor,
    text_mask: Tensor,
    video_mask: Tensor | None,
    temperature: float | Tensor,
) -> Tensor:
    """Check shapes; return ``video_mask`` (all ones when ``None``)."""
    _check_temperature(_WHERE, temperature)
    for name, x, ndim in (("video_emb", video_emb, 2), ("text_emb", text_emb, 2),
                          ("video_tokens", video_tokens, 3), ("text_hidden", text_hidden, 3),
                          ("text_mask", text_mask, 2)):
        if x.ndim != ndim:
            raise ValueError(f"{_WHERE}: {name} must be {ndim}-D; found shape {tuple(x.shape)}")
    num_videos, num_texts = video_emb.shape[0], text_emb.shape[0]
    expected = {
        "text_owner": (tuple(text_owner.shape), (num_texts,)),
        "video_tokens": (tuple(video_tokens.shape[:1]), (num_videos,)),
        "text_hidden": (tuple(text_hidden.shape[:1]), (num_texts,)),
        "text_mask": (tuple(text_mask.shape), tuple(text_hidden.shape[:2])),
    }
    if text_emb.shape[1] != video_emb.shape[1]:
        raise ValueError(f"{_WHERE}: text_emb must have the embedding size of video_emb: expected "
                         f"(*, {video_emb.shape[1]}), found {tuple(text_emb.shape)}")
    if video_mask is None:
        video_mask = torch.ones(video_tokens.shape[:2], dtype=torch.long, device=video_tokens.device)
    expected["video_mask"] = (tuple(video_mask.shape), tuple(video_tokens.shape[:2]))
    for name, (found, want) in expected.items():
        if found[: len(want)] != want or len(found) != len(want):
            raise ValueError(f"{_WHERE}: {name} must have shape {want} (leading dimensions), "
                             f"found {found}")
    if text_owner.dtype.is_floating_point or text_owner.dtype == torch.bool:
        raise ValueError(f"{_WHERE}: text_owner must hold integer video indices; found "
                         f"{text_owner.dtype}")
    bad = (text_owner < 0) | (text_owner >= num_videos)
    if bool(bad.any()):
        at = int(bad.nonzero()[0, 0])
        raise ValueError(f"{_WHERE}: text_owner[{at}] = {int(text_owner[at])} is out of range: "
                         f"expected 0 <= owner < {num_videos} (the number of videos)")
    return video_mask


@LOSSES.register
class VideoTextMatchingLoss(nn.Module):
    """Video-text matching (VTM) with hard negatives on a model's fusion layers.

    Expects the model (``fuse`` and ``match_logits`` of
    :class:`~vlr_plugins.losses.VideoTextFusion`), the contrastive embeddings ``video_emb``
    ``(B, D)`` / ``text_emb`` ``(N, D)`` (to draw negatives), ``text_owner`` ``(N,)``, the
    video tokens ``(B, Nv, C)``, the text layers' ``text_hidden`` ``(N, L, H)`` and
    ``text_mask`` ``(N, L)``; optionally ``video_mask`` ``(B, Nv)``, a ``generator`` and this
    call's ``temperature`` (pass VTC's, as UMT does; ``None`` = the module's).

    Formula: cross-entropy of ``match_logits(fuse(text, video)[:, 0])`` against 1 for the N
    positive pairs and 0 for N (caption, hard-negative video) and N (hard-negative caption,
    video) pairs, the negatives drawn by :func:`~vlr_plugins.losses.sample_hard_negatives`.

    Reference: ALBEF (NeurIPS 2021) and UMT (ICCV 2023); BLIP's ``negative_all_rank``.

    Relations: wraps :func:`~vlr_plugins.losses.video_text_matching`. It owns no weights:
    the matching head belongs to the model (retrieval re-ranks with it). Part of
    ``VideoTextPretrainingLoss``.

    Example:
        >>> import torch
        >>> from types import SimpleNamespace
        >>> from vlr_plugins.losses import VideoTextMatchingLoss
        >>> model = SimpleNamespace(fuse=lambda t, tm, v, vm: t + v.mean(1, keepdim=True),
        ...                         match_logits=torch.nn.Linear(8, 2))
        >>> loss = VideoTextMatchingLoss()(
        ...     model, torch.randn(2, 4), torch.randn(2, 4), torch.tensor([0, 1]),
        ...     torch.randn(2, 5, 8), torch.randn(2, 6, 8), torch.ones(2, 6))
        >>> loss.shape
        torch.Size([])
    """

    def __init__(self, hard_negatives: bool = True, temperature: float = 0.07,
                 gather: bool | None = None) -> None:
        super().__init__()
        _check_temperature(type(self).__name__, temperature)
        self.hard_negatives = bool(hard_negatives)
        self.temperature = float(temperature)
        self.gather = gather

    def forward(
        self,
        model: VideoTextFusion,
        video_emb: Tensor,
        text_emb: Tensor,
        text_owner: Tensor,
        video_tokens: Tensor,
        text_hidden: Tensor,
        text_mask: Tensor,
        *,
        video_mask: Tensor | None = None,
        temperature: float | Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        return video_text_matching(
            model, video_emb, text_emb, text_owner, video_tokens, text_hidden, text_mask,
            video_mask=video_mask,
            temperature=self.temperature if temperature is None else temperature,
            hard_negatives=self.hard_negatives, generator=generator, gather=self.gather,
        )

    def get_config_dict(self) -> dict[str, Any]:
        """Hyperparameters for the model card; ``type(self)(**config)`` rebuilds the loss."""
        return {"hard_negatives": self.hard_negatives, "temperature": self.temperature,
                "gather": self.gather}

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.get_config_dict().items())
