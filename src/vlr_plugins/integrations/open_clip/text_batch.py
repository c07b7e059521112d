"""The texts of a batch for open_clip_train's loop: every caption of every image, with owners.

open_clip_train's loop unpacks ``images, texts = batch`` and calls
``texts.to(device=..., non_blocking=True)``; a :class:`TextBatch` goes through that
unchanged and carries what the vlr losses need besides the token ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch
from torch import Tensor

__all__ = ["TextBatch", "TextItem", "collate_text_batch"]


@dataclass
class TextItem:
    """The texts of one image, tokenized: what a dataset yields beside the image.

    ``positives`` ``(P, L)`` (``P >= 1``), ``negatives`` ``(M, L)`` (``M >= 0``) and
    ``short`` ``(L,)`` or ``None`` (the short caption of primary-component matching).
    """

    id: str
    positives: Tensor
    negatives: Tensor | None = None
    short: Tensor | None = None


@dataclass
class TextBatch:
    """Token ids of all texts of B images, and which image each text belongs to.

    Attributes:
        tokens: ``(N, L)`` the positives of all images, image by image.
        text_owner: ``(N,)`` the image ``0..B-1`` each row of ``tokens`` describes.
        neg_tokens: ``(M, L)`` hard negatives, or ``None``.
        neg_owner: ``(M,)`` the image each negative was written for, or ``None``.
        short_tokens: ``(B, L)`` one short caption per image (Long-CLIP's PCM), or ``None``.
        ids: the B sample ids, in batch order.
        images_are_embeddings: the images of this batch are precomputed ``(B, D)``
            image embeddings, not pixels; the model skips its vision tower.

    ``len(batch)`` is B, like the image tensor beside it.
    """

    tokens: Tensor
    text_owner: Tensor
    neg_tokens: Tensor | None = None
    neg_owner: Tensor | None = None
    short_tokens: Tensor | None = None
    ids: list[str] = field(default_factory=list)
    images_are_embeddings: bool = False

    def __len__(self) -> int:
        return len(self.ids) if self.ids else int(self.text_owner.max()) + 1

    def _map(self, fn: Any) -> TextBatch:
        return replace(
            self,
            **{
                f.name: fn(getattr(self, f.name))
                for f in fields(self)
                if isinstance(getattr(self, f.name), Tensor)
            },
        )

    def to(self, *args: Any, **kwargs: Any) -> TextBatch:
        """A copy with every tensor moved by ``Tensor.to(*args, **kwargs)``; token ids and
        owners stay integers (a ``dtype`` is ignored)."""
        kwargs.pop("dtype", None)
        return self._map(lambda t: t.to(*args, **kwargs))

    def pin_memory(self) -> TextBatch:
        """Called by ``DataLoader(pin_memory=True)`` on custom batch types."""
        return self._map(Tensor.pin_memory)

    def all_tokens(self) -> Tensor:
        """``(N + M + S, L)``: positives, then negatives, then short captions, for one
        pass through the text tower; :meth:`split` cuts the embeddings back apart."""
        parts = [self.tokens]
        parts += [t for t in (self.neg_tokens, self.short_tokens) if t is not None]
        return torch.cat(parts) if len(parts) > 1 else self.tokens

    def split(self, text_features: Tensor) -> dict[str, Tensor]:
        """Rows of ``text_features`` (from :meth:`all_tokens`) by role:
        ``text_features`` ``(N, D)``, ``neg_features`` ``(M, D)``, ``short_text_features``
        ``(B, D)`` (the last two only when present)."""
        n = self.tokens.shape[0]
        out = {"text_features": text_features[:n]}
        if self.neg_tokens is not None:
            m = self.neg_tokens.shape[0]
            out["neg_features"] = text_features[n : n + m]
            n += m
        if self.short_tokens is not None:
            out["short_text_features"] = text_features[n:]
        return out


def collate_text_batch(
    batch: Sequence[tuple[Tensor, TextItem]], *, images_are_embeddings: bool = False
) -> tuple[Tensor, TextBatch]:
    """``[(image, TextItem), ...]`` -> ``(images (B, ...), TextBatch)``.

    Every item's token rows must have the same length L (the model's context length);
    a batch has hard negatives (or short captions) when any item has them, and then
    items without negatives simply own none. Short captions are all-or-none.
    """
    if not batch:
        raise ValueError("collate_text_batch: empty batch")
    images = torch.stack([image for image, _ in batch])
    items = [item for _, item in batch]
    for item in items:
        if item.positives.ndim != 2 or item.positives.shape[0] < 1:
            raise ValueError(
                f"collate_text_batch: sample {item.id!r} needs at least one positive, as a "
                f"(P, L) tensor; found shape {tuple(item.positives.shape)}"
            )
    lengths = {t.shape[-1] for item in items for t in _token_tensors(item)}
    if len(lengths) != 1:
        raise ValueError(
            f"collate_text_batch: every text must be padded to the context length; found token "
            f"rows of lengths {sorted(lengths)} (ids {[i.id for i in items]})"
        )
    tokens = torch.cat([item.positives for item in items])
    owner = torch.cat(
        [
            torch.full((item.positives.shape[0],), i, dtype=torch.long)
            for i, item in enumerate(items)
        ]
    )
    out = TextBatch(
        tokens=tokens.long(),
        text_owner=owner,
        ids=[item.id for item in items],
        images_are_embeddings=images_are_embeddings,
    )
    if any(item.negatives is not None and item.negatives.shape[0] for item in items):
        negs = [
            (i, item.negatives)
            for i, item in enumerate(items)
            if item.negatives is not None and item.negatives.shape[0]
        ]
        out.neg_tokens = torch.cat([n for _, n in negs]).long()
        out.neg_owner = torch.cat([torch.full((n.shape[0],), i, dtype=torch.long) for i, n in negs])
    shorts = [item.short for item in items]
    if any(s is not None for s in shorts):
        missing = [item.id for item in items if item.short is None]
        if missing:
            raise ValueError(
                f"collate_text_batch: samples {missing} have no short caption while "
                f"others in the batch do; give every sample one or none"
            )
        out.short_tokens = torch.stack(shorts).long()
    return images, out


def _token_tensors(item: TextItem) -> list[Tensor]:
    return [t for t in (item.positives, item.negatives, item.short) if t is not None and t.numel()]
