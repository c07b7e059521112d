"""The one training dataset of every trainer: samples + text views + a media source.

Each trainer (MMEngine, open_clip, LAVIS) wants its items shaped its own way, but the
work before that is the same everywhere: read samples, check they have what the views
need, keep the seeded data fraction, check the media (every missing embedding at once),
draw the views afresh at every step, load the sample's media. :class:`TextViewsDataset`
does that once; an integration passes a ``transform`` that shapes a
:class:`TextViewsItem` into its batch element, and builds its collate on
:func:`concat_owned`.

What changes between recipes is configuration, not code: stored image embeddings or
image files (:mod:`vlr_plugins.data.media`; a video source is one more media source),
one text per view or many, named views (MVC's summary / detailed captions drawn from
candidate field sets, :class:`~vlr_plugins.data.text_views.TextView`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch.utils.data import Dataset

from vlr_plugins.data.media import MediaSource
from vlr_plugins.data.text_views import (
    DrawnText,
    TextSample,
    TextViews,
    ViewDraws,
    check_samples_have_views,
    draw_texts,
    seeded_fraction,
)

__all__ = ["TextViewsItem", "TextViewsDataset", "draw_item", "owner_index", "concat_owned"]

T = TypeVar("T")


@dataclass
class TextViewsItem:
    """One step's draw for one sample.

    ``index``: the position in the dataset; ``sample``: the sample itself; ``media``: what
    the media source loaded (an embedding ``(D,)``, a transformed image...) or ``None``;
    ``positives`` / ``negatives``: the texts the views drew, in view order, each with its
    budget and view name.
    """

    index: int
    sample: Any
    media: Any
    positives: list[DrawnText]
    negatives: list[DrawnText]

    @property
    def id(self) -> str:
        return self.sample.id


class TextViewsDataset(Dataset):
    """Samples (paper sec. 3.1, or any corpus with ``id`` and ``texts(field)``) -> the
    recipe's texts of each sample, redrawn every step, and its media.

    Args:
        samples: the training samples, e.g. from
            :func:`~vlr_plugins.data.read_paragraph_samples`.
        views: the recipe's :class:`~vlr_plugins.data.text_views.TextViews`.
        media: a :class:`~vlr_plugins.data.media.MediaSource`, or ``None`` for text only.
        transform: ``TextViewsItem -> batch element`` (a trainer's tokenisation and
            layout); ``None`` yields the item itself. It must pickle (workers).
        source: the samples' file, named in errors.
        fraction: keep a ``seed``-ed random subset of this share of the samples (the
            data-efficiency ablation), the same subset under every trainer.
        seed: seeds the subset and the per-step draws (reproducible for a seed, new
            every epoch).

    Every sample is checked against the views, and the kept ones against the media
    source, at construction: a bad corpus fails before the first step, with every
    missing embedding listed at once.

    Example::

        >>> ds = TextViewsDataset(read_paragraph_samples("train.jsonl"), recipe.text_views,
        ...                       StoredEmbeddings("stores/cc3m"))  # doctest: +SKIP
        >>> item = ds[0]; item.media.shape, [t.text for t in item.positives]  # doctest: +SKIP
    """

    def __init__(
        self,
        samples: Sequence[TextSample],
        views: TextViews,
        media: MediaSource | None = None,
        *,
        transform: Callable[[TextViewsItem], Any] | None = None,
        source: str = "<samples>",
        fraction: float = 1.0,
        seed: int = 0,
    ) -> None:
        check_samples_have_views(samples, views.all, source)
        self.samples = seeded_fraction(samples, fraction, seed)
        self.views, self.media, self.transform, self.source, self.seed = views, media, transform, source, seed
        if media is not None:
            media.check(self.samples)
        self._draws = ViewDraws(seed)

    def __len__(self) -> int:
        return len(self.samples)

    def item(self, index: int) -> TextViewsItem:
        """The untransformed draw for ``index``."""
        sample = self.samples[index]
        media = self.media.load(sample) if self.media is not None else None
        return draw_item(sample, self.views, self._draws.rng(index), index=index, media=media)

    def __getitem__(self, index: int) -> Any:
        item = self.item(index)
        return self.transform(item) if self.transform is not None else item


def draw_item(sample: TextSample, views: TextViews, rng: random.Random, *, index: int = 0,
              media: Any = None) -> TextViewsItem:
    """One step's :class:`TextViewsItem` for ``sample``: the views drawn with ``rng``. For
    streams of samples that are no indexed dataset (webdataset shards)."""
    return TextViewsItem(index=index, sample=sample, media=media,
                         positives=draw_texts(sample, views.positives, rng),
                         negatives=draw_texts(sample, views.negatives, rng))


def owner_index(counts: Sequence[int]) -> torch.Tensor:
    """``(sum(counts),)`` long: element ``k`` of a flattened batch belongs to row ``i``
    when it is one of row ``i``'s ``counts[i]`` elements (``[2, 1] -> [0, 0, 1]``)."""
    return torch.repeat_interleave(torch.arange(len(counts)), torch.as_tensor(counts, dtype=torch.long))


def concat_owned(groups: Sequence[Sequence[T]]) -> tuple[list[T], torch.Tensor]:
    """Flatten the per-sample lists of a batch (texts, token rows...) in batch order, with
    the ``text_owner`` / ``neg_owner`` tensor the contrastive losses take: the batch row
    each element came from."""
    flat = [x for group in groups for x in group]
    return flat, owner_index([len(group) for group in groups])
