"""Masked language modeling (MLM) conditioned on the video: BERT's token corruption
(:func:`mask_tokens`), the corrupted caption through the text and fusion layers, BERT's MLM
head on the masked positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlr_plugins.losses.video_text_fusion import VideoTextFusion, check_fusion_model
from vlr_plugins.registry import LOSSES

__all__ = ["mask_tokens", "masked_language_modeling", "MaskedLanguageModelingLoss",
           "IGNORE_INDEX", "MVC_MLM_RATIO"]

#: label of a position that is not predicted (``F.cross_entropy``'s ``ignore_index``)
IGNORE_INDEX = -100
#: MVC's token masking ratio (UMT: ``mlm_masking_prob``; BERT: 0.15)
MVC_MLM_RATIO = 0.5
# BERT's split of the chosen tokens: 80% [MASK], 10% a random token, 10% unchanged
_MASK_SHARE, _RANDOM_SHARE = 0.8, 0.1


def mask_tokens(
    input_ids: Tensor,
    attention_mask: Tensor,
    special_ids: Sequence[int] | Tensor,
    mask_id: int,
    vocab_size: int,
    ratio: float = MVC_MLM_RATIO,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """BERT's corruption of token ids for masked language modeling.

    Expects:
        input_ids: ``(N, L)`` token ids; attention_mask: ``(N, L)``, 1 = token, 0 = padding.
        special_ids: ids never chosen ([CLS], [SEP], [PAD], ...; e.g. a Hugging Face
            tokenizer's ``all_special_ids``).
        mask_id: the [MASK] id; vocab_size: random replacements are drawn from
            ``0 .. vocab_size - 1`` (the MLM head's vocabulary).
        ratio: the probability that a maskable token is chosen (MVC: 0.5).
        generator: seeds the draws (a ``torch.Generator`` on the device of ``input_ids``).

    Returns:
        ``(masked_ids, labels)``, both ``(N, L)`` long: every maskable token (not padding,
        not special) is chosen with probability ``ratio``; a chosen token becomes
        [MASK] with probability 0.8, a uniformly random id with 0.1, and stays itself with
        0.1. ``labels`` is the original id at chosen positions and ``-100`` elsewhere.

    Reference: Devlin et al., "BERT", NAACL 2019 (80/10/10); UMT's ``MLMLoss.mask``
    (which protects only [PAD] and [CLS]; here every special id and every padded position).

    Example:
        >>> import torch
        >>> from vlr_plugins.losses import mask_tokens
        >>> ids = torch.tensor([[101, 7, 8, 9, 102, 0]])
        >>> masked, labels = mask_tokens(ids, (ids != 0).long(), special_ids=[0, 101, 102],
        ...                              mask_id=103, vocab_size=200, ratio=1.0,
        ...                              generator=torch.Generator().manual_seed(0))
        >>> labels.tolist()
        [[-100, 7, 8, 9, -100, -100]]
    """
    where = "mask_tokens"
    if input_ids.ndim != 2 or tuple(attention_mask.shape) != tuple(input_ids.shape):
        raise ValueError(f"{where}: input_ids and attention_mask must both be (N, L); found "
                         f"{tuple(input_ids.shape)} and {tuple(attention_mask.shape)}")
    if input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
        raise ValueError(f"{where}: input_ids must hold integer token ids; found {input_ids.dtype}")
    if not 0 < ratio <= 1:
        raise ValueError(f"{where}: ratio must be in (0, 1]; found {ratio!r}")
    if not 0 <= mask_id < vocab_size:
        raise ValueError(f"{where}: mask_id must be a token of the vocabulary: expected "
                         f"0 <= mask_id < vocab_size = {vocab_size}, found {mask_id}")
    device = input_ids.device
    special = torch.as_tensor(list(special_ids) if not isinstance(special_ids, Tensor)
                              else special_ids, dtype=torch.long, device=device)
    maskable = attention_mask.bool() & ~torch.isin(input_ids, special)
    chosen = maskable & (torch.rand(input_ids.shape, generator=generator, device=device) < ratio)
    how = torch.rand(input_ids.shape, generator=generator, device=device)
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator, device=device)
    masked = torch.where(chosen & (how < _MASK_SHARE), mask_id, input_ids)
    masked = torch.where(chosen & (how >= _MASK_SHARE) & (how < _MASK_SHARE + _RANDOM_SHARE),
                         random_ids, masked)
    labels = torch.where(chosen, input_ids, IGNORE_INDEX)
    return masked.long(), labels.long()


def masked_language_modeling(
    model: VideoTextFusion,
    input_ids: Tensor,
    attention_mask: Tensor,
    video_tokens: Tensor,
    text_owner: Tensor,
    *,
    special_ids: Sequence[int] | Tensor,
    mask_id: int,
    vocab_size: int,
    video_mask: Tensor | None = None,
    view_ids: Tensor | None = None,
    ratio: float = MVC_MLM_RATIO,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Cross-entropy of the MLM head at the masked positions of captions fused with their video.

    Expects:
        model: implements ``encode_text_tokens``, ``fuse`` and ``mlm_logits`` of
            :class:`~vlr_plugins.losses.VideoTextFusion`.
        input_ids, attention_mask: ``(N, L)`` the captions, uncorrupted.
        video_tokens: ``(B, Nv, C)``; text_owner: ``(N,)`` the video of each caption.
        special_ids, mask_id, vocab_size, ratio, generator: as :func:`mask_tokens`.
        video_mask: ``(B, Nv)`` 1 = attend; ``None`` = all tokens.
        view_ids: ``(N,)`` each caption's view, passed to ``encode_text_tokens``.

    Formula::

        masked, labels = mask_tokens(input_ids, attention_mask, ...)
        h = fuse(encode_text_tokens(masked), attention_mask, video_tokens[owner], ...)
        loss = mean over masked positions p of CE(mlm_logits(h[p]), labels[p])

    A batch in which no token was chosen (tiny, or all special) gives 0, still connected to
    the MLM head and the fusion layers (zero gradients, so DDP sees every parameter used).
    In a distributed run each rank returns the mean over its own captions (UMT, BERT);
    nothing is gathered.

    Reference: UMT, multi_modality/models/criterions.py (``MLMLoss.mlm_loss``: the text
    layers re-run on the corrupted ids, then the fusion layers with the video, then the MLM
    head); ALBEF (NeurIPS 2021); BERT (NAACL 2019).

    Relations: module ``MaskedLanguageModelingLoss``; part of ``VideoTextPretrainingLoss``.

    Example:
        >>> import torch
        >>> from types import SimpleNamespace
        >>> from vlr_plugins.losses import masked_language_modeling
        >>> words, head = torch.nn.Embedding(50, 8), torch.nn.Linear(8, 50)
        >>> model = SimpleNamespace(                     # stand-ins for BERT's layers
        ...     encode_text_tokens=lambda ids, mask, views: words(ids),
        ...     fuse=lambda t, tm, v, vm: t + v.mean(1, keepdim=True), mlm_logits=head)
        >>> ids = torch.randint(5, 50, (3, 7))
        >>> loss = masked_language_modeling(
        ...     model, ids, torch.ones_like(ids), torch.randn(2, 4, 8), torch.tensor([0, 1, 1]),
        ...     special_ids=[0, 1, 2], mask_id=3, vocab_size=50)
        >>> loss.backward()
        >>> head.weight.grad is not None
        True
    """
    where = "masked_language_modeling"
    check_fusion_model(model, ("encode_text_tokens", "fuse", "mlm_logits"), where)
    owner = text_owner.long()
    if tuple(owner.shape) != (input_ids.shape[0],):
        raise ValueError(f"{where}: text_owner must have one entry per caption: expected shape "
                         f"({input_ids.shape[0]},), found {tuple(owner.shape)}")
    if video_tokens.ndim != 3:
        raise ValueError(f"{where}: video_tokens must be (B, Nv, C); found shape "
                         f"{tuple(video_tokens.shape)}")
    if video_mask is None:
        video_mask = torch.ones(video_tokens.shape[:2], dtype=torch.long, device=video_tokens.device)
    bad = (owner < 0) | (owner >= video_tokens.shape[0])
    if bool(bad.any()):
        at = int(bad.nonzero()[0, 0])
        raise ValueError(f"{where}: text_owner[{at}] = {int(owner[at])} is out of range: "
                         f"expected 0 <= owner < {video_tokens.shape[0]} (the number of videos)")

    masked, labels = mask_tokens(input_ids, attention_mask, special_ids, mask_id, vocab_size,
                                 ratio, generator)
    hidden = model.encode_text_tokens(masked, attention_mask, view_ids)
    fused = model.fuse(hidden, attention_mask, video_tokens[owner], video_mask[owner])
    chosen = labels != IGNORE_INDEX
    logits = model.mlm_logits(fused[chosen])  # (M, V): only the predicted positions
    if logits.shape[0] == 0:
        return logits.sum()
    return F.cross_entropy(logits, labels[chosen])


@LOSSES.register
class MaskedLanguageModelingLoss(nn.Module):
    """Masked language modeling of captions through the fusion layers, conditioned on the video.

    Expects the model (``encode_text_tokens``, ``fuse``, ``mlm_logits`` of
    :class:`~vlr_plugins.losses.VideoTextFusion`), ``input_ids`` / ``attention_mask``
    ``(N, L)`` (uncorrupted), ``video_tokens`` ``(B, Nv, C)`` and ``text_owner`` ``(N,)``;
    optionally ``video_mask`` ``(B, Nv)``, ``view_ids`` ``(N,)`` and a ``generator``. The
    tokenizer's ids come in the constructor (or :meth:`from_tokenizer`).

    Formula: ``mask_tokens`` chooses each maskable token with probability ``ratio`` (80%
    [MASK], 10% random, 10% kept); ``loss = CE(mlm_logits(fused), original)`` averaged over
    the chosen positions.

    Reference: BERT (NAACL 2019); ALBEF (NeurIPS 2021); UMT (ICCV 2023); MVC's ratio 0.5.

    Relations: wraps :func:`~vlr_plugins.losses.masked_language_modeling`; owns no weights
    (the MLM head is the text encoder's, tied to its word embeddings). Part of
    ``VideoTextPretrainingLoss``.

    Example:
        >>> from vlr_plugins.losses import MaskedLanguageModelingLoss
        >>> loss_fn = MaskedLanguageModelingLoss(vocab_size=30522, mask_id=103,
        ...                                      special_ids=[0, 100, 101, 102, 103])
        >>> loss_fn.get_config_dict()["ratio"]
        0.5
    """

    def __init__(self, vocab_size: int, mask_id: int, special_ids: Sequence[int],
                 ratio: float = MVC_MLM_RATIO) -> None:
        super().__init__()
        where = type(self).__name__
        if not 0 < ratio <= 1:
            raise ValueError(f"{where}: ratio must be in (0, 1]; found {ratio!r}")
        if not 0 <= mask_id < vocab_size:
            raise ValueError(f"{where}: mask_id must be a token of the vocabulary: expected "
                             f"0 <= mask_id < vocab_size = {vocab_size}, found {mask_id}")
        self.vocab_size = int(vocab_size)
        self.mask_id = int(mask_id)
        self.special_ids = sorted({int(i) for i in special_ids})
        self.ratio = float(ratio)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, ratio: float = MVC_MLM_RATIO) -> MaskedLanguageModelingLoss:
        """The ids of a Hugging Face tokenizer: ``mask_token_id``, ``len(tokenizer)`` and
        ``all_special_ids`` (what ``DataCollatorForLanguageModeling`` protects)."""
        if getattr(tokenizer, "mask_token_id", None) is None:
            raise ValueError(f"{cls.__name__}.from_tokenizer: {type(tokenizer).__name__} has no "
                             f"mask token (mask_token_id is None); MLM needs one")
        return cls(len(tokenizer), tokenizer.mask_token_id, tokenizer.all_special_ids, ratio)

    def forward(
        self,
        model: VideoTextFusion,
        input_ids: Tensor,
        attention_mask: Tensor,
        video_tokens: Tensor,
        text_owner: Tensor,
        *,
        video_mask: Tensor | None = None,
        view_ids: Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        return masked_language_modeling(
            model, input_ids, attention_mask, video_tokens, text_owner,
            special_ids=self.special_ids, mask_id=self.mask_id, vocab_size=self.vocab_size,
            video_mask=video_mask, view_ids=view_ids, ratio=self.ratio, generator=generator,
        )

    def get_config_dict(self) -> dict[str, Any]:
        """Hyperparameters for the model card; ``type(self)(**config)`` rebuilds the loss."""
        return {"vocab_size": self.vocab_size, "mask_id": self.mask_id,
                "special_ids": list(self.special_ids), "ratio": self.ratio}

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self.get_config_dict().items())
