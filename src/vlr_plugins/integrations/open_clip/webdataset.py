"""Webdataset shards for open_clip_train, each sample with several texts.

A sample is an image (``jpg``/``jpeg``/``png``/``webp``) and a ``json`` of
:class:`~vlr_plugins.data.ParagraphSample` fields (``caption``, ``positives``,
``hard_negatives``, ``paragraph``; ``id``, else the sample key), or a plain ``txt``
caption. Shard listing, shuffling, resampling, node/worker splitting and the epoch
length are open_clip_train's own (``open_clip_train.data``); only the per-sample step
and the collate are ours.
"""

from __future__ import annotations

import io
import json
import math
import random
from functools import partial
from typing import Any

from vlr_plugins.data.dataset import draw_item
from vlr_plugins.data.media import StoredEmbeddings
from vlr_plugins.data.sample import sample_from_record
from vlr_plugins.data.text_views import check_samples_have_views
from vlr_plugins.errors import DataFormatError
from vlr_plugins.integrations.open_clip.dataset import SampleTokenizer
from vlr_plugins.integrations.open_clip.text_batch import collate_text_batch

__all__ = ["get_wds_text_views_data"]

_IMAGE_KEYS = ("jpg", "jpeg", "png", "webp")


class _DecodeSample:
    """Raw webdataset sample dict -> ``(image or embedding, TextItem)``."""

    def __init__(
        self, texts: SampleTokenizer, transform: Any, image_embeddings: str | None, seed: int
    ) -> None:
        self.texts, self.transform, self.seed = texts, transform, seed
        self.embeddings = StoredEmbeddings(image_embeddings) if image_embeddings is not None else None
        self._draws = 0

    def __call__(self, sample: dict[str, Any]) -> tuple[Any, Any]:
        where = f"{sample.get('__url__', '<shard>')}#{sample['__key__']}"
        if "json" in sample:
            raw = json.loads(sample["json"])
            if not isinstance(raw, dict):
                raise DataFormatError(where, "the .json must be an object of text fields")
        else:
            raw = {"caption": sample["txt"].decode("utf-8")}
        raw.setdefault("id", sample["__key__"])
        record = sample_from_record(raw, where, kind="sample")
        views = self.texts.views
        check_samples_have_views([record], views.all, where)
        self._draws += 1
        rng = random.Random(f"{self.seed}/{record.id}/{self._draws}/{random.random()}")
        item = self.texts(draw_item(record, views, rng))
        if self.embeddings is not None:
            return self.embeddings.load(record), item
        from PIL import Image

        data = next(sample[k] for k in _IMAGE_KEYS if k in sample)
        with Image.open(io.BytesIO(data)) as im:
            return self.transform(im.convert("RGB")), item


def _has_texts_and_image(sample: dict[str, Any]) -> bool:
    return ("json" in sample or "txt" in sample) and any(k in sample for k in _IMAGE_KEYS)


def get_wds_text_views_data(
    args: Any,
    transform: Any,
    texts: SampleTokenizer,
    *,
    epoch: int = 0,
    image_embeddings: str | None = None,
    floor: bool = False,
) -> Any:
    """open_clip_train's ``get_wds_dataset`` (training branch) with our sample step and
    collate: returns its ``DataInfo``. ``args`` are open_clip_train's parsed arguments."""
    import webdataset as wds
    from open_clip_train import data as ocd

    shards = args.train_data
    resampled = getattr(args, "dataset_resampled", False)
    num_shards = None
    if args.train_num_samples is not None:
        num_samples = args.train_num_samples
    else:
        num_samples, num_shards = ocd.get_dataset_size(shards)
        if not num_samples:
            raise ValueError(
                "webdataset shards without sizes.json / __len__: give --train-num-samples"
            )
    shared_epoch = ocd.SharedEpoch(epoch=epoch)
    if resampled:
        pipeline = [
            ocd.ResampledShards2(
                shards,
                weights=args.train_data_upsampling_factors,
                deterministic=True,
                epoch=shared_epoch,
            )
        ]
    else:
        pipeline = [
            wds.SimpleShardList(shards),
            ocd.detshuffle2(
                bufsize=ocd._SHARD_SHUFFLE_SIZE,
                initial=ocd._SHARD_SHUFFLE_INITIAL,
                seed=args.seed,
                epoch=shared_epoch,
            ),
            wds.split_by_node,
            wds.split_by_worker,
        ]
    pipeline += [
        ocd.tarfile_to_samples_nothrow,
        wds.shuffle(bufsize=ocd._SAMPLE_SHUFFLE_SIZE, initial=ocd._SAMPLE_SHUFFLE_INITIAL),
        wds.select(_has_texts_and_image),
        wds.map(_DecodeSample(texts, transform, image_embeddings, args.seed)),
        wds.batched(
            args.batch_size,
            partial=False,
            collation_fn=partial(
                collate_text_batch, images_are_embeddings=image_embeddings is not None
            ),
        ),
    ]
    dataset = wds.DataPipeline(*pipeline)
    if not resampled:
        num_shards = num_shards or len(ocd.expand_urls(shards)[0])
        if num_shards < args.workers * args.world_size:
            raise ValueError(
                f"{num_shards} shards cannot feed {args.workers} workers x "
                f"{args.world_size} processes; use fewer --workers or more shards"
            )
    round_fn = math.floor if floor else math.ceil
    global_batch_size = args.batch_size * args.world_size
    num_workers = max(1, args.workers)
    num_worker_batches = round_fn(round_fn(num_samples / global_batch_size) / num_workers)
    num_batches = num_worker_batches * num_workers
    dataset = dataset.with_epoch(num_worker_batches)
    loader = wds.WebLoader(
        dataset,
        batch_size=None,
        shuffle=False,
        num_workers=args.workers,
        persistent_workers=args.workers > 0,
    )
    loader.num_batches = num_batches
    loader.num_samples = num_batches * global_batch_size
    return ocd.DataInfo(dataloader=loader, shared_epoch=shared_epoch)
