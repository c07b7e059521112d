"""Image + several texts per sample, for open_clip_train: JSON Lines, Parquet, CSV/TSV.

Samples, views, checks, data fraction, per-step draws and media are the core's
(:class:`~vlr_plugins.data.TextViewsDataset` with
:class:`~vlr_plugins.data.StoredEmbeddings` or :class:`~vlr_plugins.data.ImageFiles`);
this module tokenizes the drawn texts the open_clip way (each view's ``max_tokens`` is
its budget, padded to the model's context length; optional short captions) and lays
items out as ``(image, TextItem)`` for
:func:`~vlr_plugins.integrations.open_clip.text_batch.collate_text_batch`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import partial
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader

from vlr_plugins.data.dataset import TextViewsDataset, TextViewsItem
from vlr_plugins.data.media import ImageFiles, StoredEmbeddings
from vlr_plugins.data.sample import TEXT_FIELDS, ParagraphSample, read_paragraph_samples
from vlr_plugins.integrations.open_clip.text_batch import TextItem, collate_text_batch
from vlr_plugins.recipe import TextViews

__all__ = [
    "SampleTokenizer",
    "TextViewsImageDataset",
    "first_sentence",
    "read_image_text_samples",
    "make_train_loader",
]

_TABLE_SUFFIXES = (".csv", ".tsv")


def first_sentence(text: str) -> str:
    """Long-CLIP's short caption of a long one: the text up to its first ``". "``
    (newlines read as spaces), as in its ShareGPT4V training set."""
    return text.replace("\n", " ").split(". ")[0]


class SampleTokenizer:
    """Tokenizes the texts the views drew for a sample: ``TextViewsItem -> TextItem``.

    ``tokenizer``: an open_clip tokenizer (``tokenizer(texts, context_length=n)`` ->
    ``(len(texts), n)``); each text is cut to its view's ``max_tokens`` and right-padded
    with ``pad_id`` to ``context_length``. ``short``: ``None``; ``"first-sentence"``
    (:func:`first_sentence` of the first positive, at that view's budget); or
    ``"field:NAME"`` (the first text of that sample field).
    """

    def __init__(
        self,
        tokenizer: Any,
        context_length: int,
        views: TextViews,
        short: str | None = None,
        pad_id: int | None = None,
    ) -> None:
        for kind, vs in (("positives", views.positives), ("negatives", views.negatives)):
            for i, v in enumerate(vs):
                if v.max_tokens > context_length:
                    raise ValueError(
                        f"text_views.{kind}[{i}] (field {v.field!r}) has max_tokens "
                        f"{v.max_tokens}, more than the model's context length {context_length}: "
                        f"use a long-context "
                        f"model (a '-ctx248' name or --vlr-context-length) or a smaller budget"
                    )
        if short is not None and short != "first-sentence":
            field = short.removeprefix("field:")
            if not short.startswith("field:") or field not in TEXT_FIELDS:
                raise ValueError(
                    f"short captions: expected 'first-sentence' or 'field:NAME' with NAME "
                    f"one of {', '.join(TEXT_FIELDS)}; found {short!r}"
                )
        self.tokenizer, self.context_length, self.views, self.short = (
            tokenizer,
            context_length,
            views,
            short,
        )
        inner = getattr(
            tokenizer, "tokenizer", None
        )  # open_clip's HFTokenizer wraps a transformers one
        self.pad_id = pad_id if pad_id is not None else (getattr(inner, "pad_token_id", None) or 0)

    def _tokens(self, texts: Sequence[str], budget: int) -> Tensor:
        ids = self.tokenizer(list(texts), context_length=budget)
        if budget < self.context_length:
            pad = ids.new_full((ids.shape[0], self.context_length - budget), self.pad_id)
            ids = torch.cat([ids, pad], dim=1)
        return ids.long()

    def _block(self, drawn: Sequence[Any]) -> Tensor:
        rows = [self._tokens([d.text], d.max_tokens) for d in drawn]
        return torch.cat(rows) if rows else torch.empty(0, self.context_length, dtype=torch.long)

    def __call__(self, item: TextViewsItem) -> TextItem:
        pos, neg = item.positives, item.negatives
        out = TextItem(item.id, self._block(pos), self._block(neg) if self.views.negatives else None)
        if self.short == "first-sentence":
            out.short = self._tokens([first_sentence(pos[0].text)], pos[0].max_tokens)[0]
        elif self.short is not None:
            texts = item.sample.texts(self.short.removeprefix("field:"))
            if not texts:
                raise ValueError(
                    f"sample {item.id!r} has no {self.short} text for its short caption"
                )
            out.short = self._tokens(texts[:1], pos[0].max_tokens)[0]
        return out


class _ImageAndTexts:
    """The dataset's transform: ``TextViewsItem -> (image or embedding, TextItem)``."""

    def __init__(self, texts: SampleTokenizer) -> None:
        self.texts = texts

    def __call__(self, item: TextViewsItem) -> tuple[Any, TextItem]:
        return item.media, self.texts(item)


# --------------------------------------------------------------------------- reading


def read_image_text_samples(
    path: str | os.PathLike,
    *,
    image_key: str | None = None,
    caption_key: str = "caption",
    image_root: str | os.PathLike | None = None,
    separator: str = "\t",
) -> list[ParagraphSample]:
    """Samples with their image paths (``sample.media``) from JSON Lines / Parquet or CSV / TSV,
    with open_clip_train's defaults: :func:`~vlr_plugins.data.read_paragraph_samples` with the
    image under ``image_key`` (default ``"image"``; ``"filepath"`` in CSV / TSV, open_clip's
    ``--csv-img-key``), the caption under ``caption_key``, a tab ``separator`` (open_clip's
    ``--csv-separator``); relative image paths are taken from ``image_root``, by default
    the file's folder."""
    table = str(path).lower().endswith(_TABLE_SUFFIXES)
    return read_paragraph_samples(
        path, media_key=image_key or ("filepath" if table else "image"), media_root=image_root,
        caption_key=caption_key, separator=separator,
    )


# --------------------------------------------------------------------------- dataset


class TextViewsImageDataset(TextViewsDataset):
    """``(image, TextItem)`` per sample; the image is ``transform(PIL image)`` of
    ``sample.media`` or, with an ``image_embeddings`` store, the sample's precomputed
    ``(D,)`` embedding (no file is opened).

    ``texts``: a :class:`SampleTokenizer`. Checks, the ``seed``-ed data ``fraction`` and
    the per-step draws are :class:`~vlr_plugins.data.TextViewsDataset`'s.
    """

    def __init__(
        self,
        samples: Sequence[ParagraphSample],
        texts: SampleTokenizer,
        transform: Any = None,
        image_embeddings: str | None = None,
        *,
        source: str = "<samples>",
        fraction: float = 1.0,
        seed: int = 0,
    ) -> None:
        if image_embeddings is None and transform is None:
            raise ValueError("TextViewsImageDataset needs an image transform or an image_embeddings store")
        media = StoredEmbeddings(image_embeddings) if image_embeddings is not None else ImageFiles(transform)
        self.image_embeddings = image_embeddings
        super().__init__(samples, texts.views, media, transform=_ImageAndTexts(texts), source=source,
                         fraction=fraction, seed=seed)


def make_train_loader(
    dataset: TextViewsImageDataset,
    *,
    batch_size: int,
    workers: int,
    world_size: int = 1,
    rank: int = 0,
    seed: int = 0,
    pin_memory: bool = True,
) -> DataLoader:
    """open_clip's CSV loader settings (shuffled, drop_last) with the TextBatch collate; sets
    ``num_samples`` / ``num_batches``. The order is a ``DistributedSampler``'s whatever the
    number of processes (one process: ``num_replicas=1``): one permutation per epoch drawn
    from ``seed`` and the epoch (``DataInfo.set_epoch``), rank ``r`` taking its positions
    ``r, r + world_size, ...``, so global batch ``i`` holds the same samples with one process
    of ``world_size * batch_size`` or ``world_size`` processes of ``batch_size``."""
    from torch.utils.data.distributed import DistributedSampler

    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=workers,
        pin_memory=pin_memory,
        sampler=sampler,
        drop_last=True,
        collate_fn=partial(
            collate_text_batch, images_are_embeddings=dataset.image_embeddings is not None
        ),
    )
    if len(loader) == 0:
        raise ValueError(
            f"{len(dataset)} training samples make no full batch of {batch_size}"
            + (" per process" if world_size > 1 else "")
        )
    loader.num_samples = len(dataset)
    loader.num_batches = len(loader)
    return loader
