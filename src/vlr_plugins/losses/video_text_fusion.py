"""The interface through which the video-text matching and masked-language-modeling losses
run a model: :class:`VideoTextFusion`. The losses never see the architecture, only these
four methods.
"""

from __future__ import annotations

from typing import Protocol

from torch import Tensor

__all__ = ["VideoTextFusion", "check_fusion_model"]


class VideoTextFusion(Protocol):
    """What :func:`~vlr_plugins.losses.video_text_matching` and
    :func:`~vlr_plugins.losses.masked_language_modeling` call on the model being trained.

    UMT's (and ALBEF's) layout: a BERT whose lower layers encode the text alone and whose
    upper layers (the *fusion* layers) add cross-attention to the video tokens; a binary
    matching head on the fused [CLS] state; BERT's MLM head on the fused token states.
    Any model that can answer these four calls plugs in (a plain object whose attributes
    are functions works too, e.g. a ``types.SimpleNamespace``):

    ``fuse(text_hidden, text_mask, video_tokens, video_mask) -> (n, L, H)``
        Runs the fusion layers over ``n`` (text, video) pairs, row ``i`` pairing text
        ``i`` with video ``i``. ``text_hidden`` ``(n, L, H)``: the text layers' output;
        ``text_mask`` ``(n, L)``: 1 = token, 0 = padding; ``video_tokens`` ``(n, Nv, C)``;
        ``video_mask`` ``(n, Nv)``: 1 = attend (all ones when the caller has no mask).
        Position 0 of the output is the pair's [CLS] state (the dual-CLS text encoder puts
        the caption view's CLS there). The dual-CLS encoder's ``fuse`` has this signature.
    ``match_logits(cls_hidden) -> (n, 2)``
        The video-text matching head (``nn.Linear(H, 2)``: logit 1 = "matched") on the
        fused [CLS] states ``(n, H)``. The model owns it, since retrieval re-ranks with it.
    ``encode_text_tokens(input_ids, attention_mask, view_ids) -> (n, L, H)``
        The text layers alone (no video), as for the contrastive embedding, on token ids
        that masked language modeling has corrupted. ``view_ids`` ``(n,)`` long names each
        row's caption view (which CLS a dual-CLS encoder uses), or ``None``.
    ``mlm_logits(hidden) -> (..., V)``
        BERT's MLM head (tied to the word embeddings) on fused token states ``(..., H)``;
        the loss passes only the masked positions, ``(M, H)``, so that the ``(n, L, V)``
        logits of every position are never built.

    Which loss calls what: matching uses ``fuse`` and ``match_logits``; masked language
    modeling uses ``encode_text_tokens``, ``fuse`` and ``mlm_logits``; each checks that
    its methods exist before running and names the missing ones.
    """

    def fuse(self, text_hidden: Tensor, text_mask: Tensor, video_tokens: Tensor,
             video_mask: Tensor) -> Tensor: ...

    def match_logits(self, cls_hidden: Tensor) -> Tensor: ...

    def encode_text_tokens(self, input_ids: Tensor, attention_mask: Tensor,
                           view_ids: Tensor | None) -> Tensor: ...

    def mlm_logits(self, hidden: Tensor) -> Tensor: ...


def check_fusion_model(model: object, methods: tuple[str, ...], where: str) -> None:
    """Raise ``TypeError`` naming what ``model`` lacks of ``methods`` (for ``where``)."""
    missing = [m for m in methods if not callable(getattr(model, m, None))]
    if missing:
        raise TypeError(
            f"{where}: the model must implement {', '.join(methods)} (see "
            f"vlr_plugins.losses.VideoTextFusion); {type(model).__name__} lacks "
            f"{', '.join(missing)}"
        )
