"""An open_clip model that also takes a :class:`TextBatch`; its checkpoints stay open_clip's."""

from __future__ import annotations

from functools import partial
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from vlr_plugins.integrations.open_clip.text_batch import TextBatch
from vlr_plugins.losses import cached_encode

__all__ = ["TextBatchCLIP"]

_CHILD = "model"


class TextBatchCLIP(nn.Module):
    """Wraps an open_clip ``CLIP`` / ``CustomTextCLIP`` so that ``forward`` accepts a
    :class:`TextBatch` (several captions per image, hard negatives, short captions).

    ``forward(images, texts)``: with plain token ids ``texts`` ``(B, L)`` it is the inner
    model's forward, so open_clip's validation and zero-shot evaluation run unchanged.
    With a ``TextBatch`` it encodes all texts in one pass and returns open_clip's output
    dict (``image_features`` ``(B, D)``, ``text_features`` ``(N, D)``, ``logit_scale``)
    plus ``text_owner`` ``(N,)`` and, when present, ``neg_features`` ``(M, D)`` /
    ``neg_owner`` ``(M,)`` and ``short_text_features`` ``(B, D)``. When
    ``texts.images_are_embeddings`` the images are precomputed ``(B, D)`` embeddings and
    the vision tower does not run.

    ``cache_chunk``: encode a ``TextBatch``'s texts (and, when the vision tower trains, its
    images) with gradient caching, that many rows at a time
    (:func:`~vlr_plugins.losses.cached_encode`), so that open_clip_train's own
    ``backward(total_loss, scaler)`` re-encodes chunk by chunk; ``None``: one pass each.

    Every other attribute (``encode_image``, ``encode_text``, ``logit_scale``,
    ``lock_image_tower`` ...) is the inner model's, and ``state_dict`` /
    ``load_state_dict`` use the inner model's keys, also when the wrapper sits inside
    ``DistributedDataParallel``: a checkpoint is a plain open_clip checkpoint.
    """

    def __init__(self, model: nn.Module, cache_chunk: int | None = None) -> None:
        super().__init__()
        if isinstance(model, TextBatchCLIP):
            raise TypeError("TextBatchCLIP: the model is already wrapped")
        self.add_module(_CHILD, model)
        self.cache_chunk = cache_chunk
        self.register_state_dict_post_hook(_drop_child_prefix)
        self.register_load_state_dict_pre_hook(_add_child_prefix)

    @property
    def inner(self) -> nn.Module:
        """The wrapped open_clip model."""
        return self._modules[_CHILD]

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            # read through __dict__: copy/pickle call this on objects without _modules yet
            inner = self.__dict__.get("_modules", {}).get(_CHILD)
            if inner is None:
                raise
            return getattr(inner, name)

    def forward(self, image: Tensor | None = None, text: Tensor | TextBatch | None = None) -> Any:
        if not isinstance(text, TextBatch):
            return self.inner(image, text)
        model = self.inner
        if getattr(model, "logit_bias", None) is not None:
            raise ValueError(
                "TextBatchCLIP: models with a logit_bias (SigLIP) need a sigmoid loss; "
                "the vlr losses are softmax InfoNCE losses"
            )
        chunk = self.cache_chunk
        if text.images_are_embeddings:
            image_features = F.normalize(image, dim=-1)
        else:
            image_features = cached_encode(partial(model.encode_image, normalize=True), image,
                                           chunk_size=chunk, parameters=model.visual)
        text_features = cached_encode(partial(model.encode_text, normalize=True), text.all_tokens(),
                                      chunk_size=chunk, parameters=_text_tower(model))
        if image_features.shape[-1] != text_features.shape[-1]:
            raise ValueError(
                f"TextBatchCLIP: the image embeddings are {image_features.shape[-1]}-d but the "
                f"text tower outputs {text_features.shape[-1]}-d vectors; precomputed embeddings "
                f"must come "
                f"from this model's own vision tower"
            )
        out = {
            "image_features": image_features,
            **text.split(text_features),
            "logit_scale": model.logit_scale.exp(),
            "text_owner": text.text_owner,
        }
        if text.neg_owner is not None:
            out["neg_owner"] = text.neg_owner
        return out


def _text_tower(model: nn.Module) -> list[nn.Parameter]:
    """Everything but the vision tower and the logit scale / bias: the text tower of ``CLIP``
    (whose text modules sit on the model itself) and of ``CustomTextCLIP`` (``model.text``)."""
    return [p for name, p in model.named_parameters()
            if not name.startswith("visual.") and name not in ("logit_scale", "logit_bias")]


def _drop_child_prefix(
    module: nn.Module, state_dict: dict, prefix: str, local_metadata: Any
) -> None:
    inner = prefix + _CHILD + "."
    for key in [k for k in state_dict if k.startswith(inner)]:
        state_dict[prefix + key[len(inner) :]] = state_dict.pop(key)


def _add_child_prefix(module: nn.Module, state_dict: dict, prefix: str, *args: Any) -> None:
    inner = prefix + _CHILD + "."
    for key in [k for k in state_dict if k.startswith(prefix) and not k.startswith(inner)]:
        state_dict[inner + key[len(prefix) :]] = state_dict.pop(key)
