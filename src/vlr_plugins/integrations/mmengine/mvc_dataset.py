"""The MVC training data as MMEngine sees it: the core dataset over video clips, and its collate.

The work lives in the core: :func:`~vlr_plugins.data.read_mvc_samples` reads and checks the
corpus, :class:`~vlr_plugins.data.TextViewsDataset` draws each step's summary and detailed
captions from the recipe's candidate fields (seeded, new every step), and
:class:`~vlr_plugins.data.VideoClips` decodes and samples the video's frames in the worker.
This module declares the dataset with the arguments a config gives, tokenizes each drawn
caption at its view's budget, and stacks a batch.

Draws in the main process (``num_workers: 0``) are the sample's own: each item's frames,
crop, flip and captions come from a generator seeded by the dataset's ``seed``, the epoch
(MMEngine's message hub) and the sample's index, and leave torch's global generator as they
found it. So a sample gets the same clip and captions whatever the number of processes
(``torchrun``), rank or position in the epoch, and a resumed run draws what the
uninterrupted one drew. In data-loader workers the draws come from the worker's seed, as
the core dataset makes them (MMEngine seeds the workers per rank).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import get_worker_info

from vlr_plugins.data.dataset import TextViewsDataset, TextViewsItem, concat_owned
from vlr_plugins.data.mvc_samples import read_mvc_samples
from vlr_plugins.data.text_views import TextView, TextViews, ViewDraws
from vlr_plugins.data.video import video_transform
from vlr_plugins.data.video_media import VideoClips
from vlr_plugins.integrations.mmengine.dataset import _TokenIds
from vlr_plugins.integrations.mmengine.registry import DATASETS, FUNCTIONS
from vlr_plugins.text.tokenizer import pad_token_rows

__all__ = ["MVCVideoTextDataset", "vlr_mvc_collate"]


def _training_epoch() -> int | None:
    """The epoch MMEngine's runner is in (``None`` outside a run)."""
    from mmengine.logging import MessageHub

    if not MessageHub._instance_dict:
        return None
    return MessageHub.get_current_instance().get_info("epoch")


class _SampleDraws(ViewDraws):
    """``take: random`` draws of a sample from ``(seed, epoch, index)`` in the main process of
    a run: not from the process's count of items, which depends on the world size."""

    def rng(self, index: int) -> random.Random:
        epoch = _training_epoch()
        if get_worker_info() is not None or epoch is None:
            return super().rng(index)
        return random.Random(f"{self.seed}/{epoch}/{index}")


class _MVCTrainItem:
    """``TextViewsItem`` -> ``{"id", "frames" (T, 3, S, S), "texts" (token ids), "views"}``:
    each caption's tokens at its view's budget, and its view name's index in ``views``."""

    def __init__(self, tokenizer_path: str, views: Sequence[str]) -> None:
        self.token_ids = _TokenIds(tokenizer_path)
        self.views = tuple(views)

    def __call__(self, item: TextViewsItem) -> dict[str, Any]:
        drawn = item.positives
        ids = self.token_ids([d.text for d in drawn], [d.max_tokens for d in drawn])
        return {"id": item.id, "frames": item.media, "texts": ids,
                "views": [self.views.index(d.view) for d in drawn]}


@DATASETS.register_module()
class MVCVideoTextDataset(TextViewsDataset):
    """MVC samples (a video and its caption views) -> a clip and one caption per view, tokenized.

    Args:
        ann_file: JSON Lines or Parquet of :class:`~vlr_plugins.data.MVCSample` records.
        positives: the recipe's text views (``TextView`` fields as dicts), each with a
            ``name`` in ``views``: MVC's ``summary`` from ``[O, S1, S2]`` and ``detailed``
            from ``[D1*, D2*, P1, P2]``, one caption each, drawn anew at every step.
        tokenizer: a tokenizer folder or Hub name.
        views: the view names, in the order the text encoder numbers them
            (``DualCLSTextEncoder``'s ``("summary", "detailed")``).
        frames, sampler, image_size, mean, std, crop_scale, backend: how clips are read
            (:class:`~vlr_plugins.data.VideoClips` with
            ``video_transform(True, image_size, mean, std, scale=crop_scale)``).
        video_root: where relative video paths start (default: ``ann_file``'s folder).
        check_files: look for every video file before the first step.
        fraction, seed: the core dataset's seeded subset and per-step draws.

    Items: ``{"id", "frames": (T, 3, S, S) float32, "texts": [token ids per caption],
    "views": [index in views per caption]}``; :func:`vlr_mvc_collate` batches them.
    """

    def __init__(self, ann_file: str, positives: Sequence[dict], tokenizer: str, *,
                 views: Sequence[str] = ("summary", "detailed"), frames: int = 16, sampler: str = "rand",
                 image_size: int = 224, mean: Sequence[float] = (0.485, 0.456, 0.406),
                 std: Sequence[float] = (0.229, 0.224, 0.225), crop_scale: Sequence[float] = (0.5, 1.0),
                 backend: str = "pyav", video_root: str | None = None, check_files: bool = True,
                 fraction: float = 1.0, seed: int = 0) -> None:
        text_views = TextViews(tuple(v if isinstance(v, TextView) else TextView(**v) for v in positives))
        unnamed = [v.label for v in text_views.positives if v.name not in views]
        if unnamed:
            raise ValueError(f"every view needs a name in {tuple(views)}; {unnamed[0]} has none of them")
        self.ann_file, self.tokenizer_path = ann_file, tokenizer
        transform = video_transform(True, image_size, mean, std, scale=tuple(crop_scale))
        clips = VideoClips(frames, sampler, transform, backend=backend, check_files=check_files)
        super().__init__(read_mvc_samples(ann_file, video_root=video_root), text_views, clips,
                         transform=_MVCTrainItem(tokenizer, views), source=ann_file, fraction=fraction, seed=seed)
        self._draws = _SampleDraws(seed)

    def __getitem__(self, index: int) -> Any:
        epoch = _training_epoch()
        if get_worker_info() is not None or epoch is None:
            return super().__getitem__(index)
        # the clip's frames, crop and flip from the sample's own seed, torch's state kept
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(random.Random(f"{self.seed}/{epoch}/{index}/clip").getrandbits(63))
            return super().__getitem__(index)


@FUNCTIONS.register_module()
def vlr_mvc_collate(batch: Sequence[dict], pad_token_id: int = 0) -> dict[str, Any]:
    """Stack the clips (B, T, 3, S, S); pad every caption of the batch into one block.

    ``input_ids`` / ``attention_mask`` (N, L); ``text_owner`` (N,) each caption's video;
    ``text_view`` (N,) each caption's view index (the dataset's ``views`` order).
    """
    texts, owner = concat_owned([b["texts"] for b in batch])
    views, _ = concat_owned([b["views"] for b in batch])
    input_ids, attention_mask = pad_token_rows(texts, pad_token_id)
    return {
        "frames": torch.stack([b["frames"] for b in batch]),
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "text_owner": owner,
        "text_view": torch.tensor(views, dtype=torch.long),
        "ids": [b["id"] for b in batch],
    }
