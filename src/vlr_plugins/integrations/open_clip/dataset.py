"""Image + several texts per sample, for open_clip_train: JSON Lines, Parquet, CSV/TSV.

Texts are read as :class:`~vlr_plugins.data.ParagraphSample` fields (``caption``,
``positives``, ``hard_negatives``, ``paragraph``) and drawn by a recipe's text views
(:func:`~vlr_plugins.data.draw_texts`); each view's ``max_tokens`` is its budget, padded
to the model's context length. Batches are ``(images, TextBatch)``
(:func:`~vlr_plugins.integrations.open_clip.text_batch.collate_text_batch`).
"""

from __future__ import annotations

import json
import math
import os
import random
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from vlr_plugins.data.embedding_store import LazyStoreMixin
from vlr_plugins.data.errors import DataFormatError, _type_name
from vlr_plugins.data.sample import TEXT_FIELDS, ParagraphSample, read_paragraph_samples
from vlr_plugins.data.text_views import (
    ViewDraws,
    check_samples_have_views,
    draw_texts,
    seeded_fraction,
)
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
SAMPLE_SUFFIXES = (".jsonl", ".json", ".parquet", *_TABLE_SUFFIXES)


def first_sentence(text: str) -> str:
    """Long-CLIP's short caption of a long one: the text up to its first ``". "``
    (newlines read as spaces), as in its ShareGPT4V training set."""
    return text.replace("\n", " ").split(". ")[0]


class SampleTokenizer:
    """Draws a sample's texts by the text views and tokenizes them: ``(sample, rng) -> TextItem``.

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

    def __call__(self, sample: ParagraphSample, rng: random.Random) -> TextItem:
        pos = draw_texts(sample, self.views.positives, rng)
        neg = draw_texts(sample, self.views.negatives, rng)
        item = TextItem(
            sample.id, self._block(pos), self._block(neg) if self.views.negatives else None
        )
        if self.short == "first-sentence":
            item.short = self._tokens([first_sentence(pos[0].text)], pos[0].max_tokens)[0]
        elif self.short is not None:
            texts = sample.texts(self.short.removeprefix("field:"))
            if not texts:
                raise ValueError(
                    f"sample {sample.id!r} has no {self.short} text for its short caption"
                )
            item.short = self._tokens(texts[:1], pos[0].max_tokens)[0]
        return item


# --------------------------------------------------------------------------- reading


def _record_sample(raw: dict[str, Any], path: str, record: int, kind: str) -> ParagraphSample:
    """A ParagraphSample from a CSV row or a webdataset .json, validated like the JSONL reader."""

    def bad(field: str, problem: str) -> DataFormatError:
        return DataFormatError(path, problem, record=record, field=field, record_kind=kind)

    values: dict[str, Any] = {}
    for field, arity in TEXT_FIELDS.items():
        value = raw.get(field)
        if value is None or (isinstance(value, float) and math.isnan(value)):  # empty CSV cell
            continue
        if arity == "many":
            if isinstance(value, str):
                try:
                    value = json.loads(value) if value.lstrip().startswith("[") else [value]
                except json.JSONDecodeError as e:
                    raise bad(field, f"expected a JSON list of strings: {e.msg}") from None
            if not isinstance(value, list) or not all(
                isinstance(t, str) and t.strip() for t in value
            ):
                raise bad(field, f"expected a list of non-empty strings, found {value!r}")
        elif not isinstance(value, str) or not value.strip():
            raise bad(field, f"expected a non-empty string, found {_type_name(value)} {value!r}")
        values[field] = value
    if "caption" not in values:
        raise bad("caption", "missing; every sample needs a caption")
    sample_id = raw.get("id")
    if sample_id is None or (isinstance(sample_id, float) and math.isnan(sample_id)):
        raise bad("id", "missing")
    return ParagraphSample(id=str(sample_id), **values)


def _resolve(image: Any, root: Path, path: str, record: int, kind: str, key: str) -> Path:
    if not isinstance(image, str) or not image:
        raise DataFormatError(
            path,
            f"expected an image path, found {_type_name(image)} {image!r}",
            record=record,
            field=key,
            record_kind=kind,
        )
    p = Path(image)
    return p if p.is_absolute() else root / p


def read_image_text_samples(
    path: str | os.PathLike,
    *,
    image_key: str | None = None,
    caption_key: str = "caption",
    image_root: str | os.PathLike | None = None,
    separator: str = "\t",
) -> list[tuple[ParagraphSample, Path]]:
    """``(sample, image path)`` pairs from JSON Lines / Parquet or CSV / TSV.

    JSON Lines and Parquet hold :func:`~vlr_plugins.data.read_paragraph_samples` records
    plus the image path under ``image_key`` (default ``"image"``). CSV / TSV (open_clip's
    layout; ``separator``) have the image under ``image_key`` (default ``"filepath"``),
    the caption under ``caption_key``, optional ``id`` (default: the row number),
    ``paragraph``, and ``positives`` / ``hard_negatives`` as JSON lists. Relative image
    paths are taken from ``image_root``, by default the file's folder.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    root = Path(image_root) if image_root is not None else path.parent
    if suffix in _TABLE_SUFFIXES:
        import pandas as pd

        key = image_key or "filepath"
        frame = pd.read_csv(path, sep=separator, dtype=str, keep_default_na=False, na_values=[""])
        for column in (key, caption_key):
            if column not in frame.columns:
                raise DataFormatError(
                    path,
                    f"no column {column!r}; columns: {list(frame.columns)} "
                    f"(separator {separator!r})",
                    field=column,
                )
        out, first_seen = [], {}
        for row, raw in enumerate(frame.to_dict("records"), start=2):  # line 1 is the header
            raw = {k: v for k, v in raw.items() if not (isinstance(v, float) and math.isnan(v))}
            raw["caption"] = raw.pop(caption_key, None)
            raw.setdefault("id", str(row - 2))
            sample = _record_sample(raw, str(path), row, "line")
            if sample.id in first_seen:
                raise DataFormatError(
                    path,
                    f"duplicate id {sample.id!r}, first seen on line {first_seen[sample.id]}",
                    record=row,
                    field="id",
                )
            first_seen[sample.id] = row
            out.append((sample, _resolve(raw.get(key), root, str(path), row, "line", key)))
        return out
    if suffix not in SAMPLE_SUFFIXES:
        raise ValueError(
            f"cannot read image-text samples from {path}: expected one of "
            f"{', '.join(SAMPLE_SUFFIXES)}, found {path.suffix or '(none)'!r}"
        )
    key = image_key or "image"
    samples = read_paragraph_samples(path)
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        names = pq.ParquetFile(path).schema_arrow.names
        if key not in names:
            raise DataFormatError(path, f"no column {key!r}; columns: {names}", field=key)
        images = pq.read_table(path, columns=[key]).column(key).to_pylist()
        places = [(i, "row") for i in range(len(images))]
    else:
        images, places = [], []
        with open(path, encoding="utf-8-sig") as f:
            for line_no, line in enumerate(f, start=1):
                if line.strip():  # the records read_paragraph_samples returned, in order
                    images.append(json.loads(line).get(key))
                    places.append((line_no, "line"))
    return [
        (s, _resolve(image, root, str(path), where, kind, key))
        for s, image, (where, kind) in zip(samples, images, places)
    ]


# --------------------------------------------------------------------------- dataset


class TextViewsImageDataset(LazyStoreMixin, Dataset):
    """``(image, TextItem)`` per sample; the image is ``transform(PIL image)`` or, with an
    ``image_embeddings`` store, the sample's precomputed ``(D,)`` embedding (no file is opened).

    ``texts``: a :class:`SampleTokenizer`. Every sample is checked against the views,
    and every id against the store, at construction (all problems of a kind at once).
    ``fraction`` < 1 keeps a ``seed``-ed random subset; random views are redrawn at
    every step, reproducibly for a seed.
    """

    def __init__(
        self,
        samples: Sequence[tuple[ParagraphSample, Path]],
        texts: SampleTokenizer,
        transform: Any = None,
        image_embeddings: str | None = None,
        *,
        source: str = "<samples>",
        fraction: float = 1.0,
        seed: int = 0,
    ) -> None:
        views = (*texts.views.positives, *texts.views.negatives)
        check_samples_have_views([s for s, _ in samples], views, source)
        samples = seeded_fraction(samples, fraction, seed)
        self.samples, self.texts, self.transform, self.seed = list(samples), texts, transform, seed
        self.image_embeddings = image_embeddings
        if image_embeddings is not None:
            self.store.check([s.id for s, _ in self.samples])
        elif transform is None:
            raise ValueError(
                "TextViewsImageDataset needs an image transform or an image_embeddings store"
            )
        self._view_draws = ViewDraws(seed)

    def __len__(self) -> int:
        return len(self.samples)

    def _rng(self, index: int) -> random.Random:
        return self._view_draws.rng(index)

    def __getitem__(self, index: int) -> tuple[Tensor, TextItem]:
        sample, image_path = self.samples[index]
        item = self.texts(sample, self._rng(index))
        if self.image_embeddings is not None:
            return self.store.get([sample.id])[0], item
        return self.transform(_open_image(image_path, sample.id)), item


def _open_image(path: Path, sample_id: str) -> Any:
    from PIL import Image

    try:
        with Image.open(path) as im:
            return im.convert("RGB")
    except Exception as e:  # PIL raises OSError, ValueError, SyntaxError, DecompressionBombError...
        raise DataFormatError(
            path, f"cannot read the image of sample {sample_id!r}: {type(e).__name__}: {e}"
        ) from e


def make_train_loader(
    dataset: TextViewsImageDataset,
    *,
    batch_size: int,
    workers: int,
    distributed: bool,
    pin_memory: bool = True,
) -> DataLoader:
    """open_clip's CSV loader settings (shuffle, drop_last, a DistributedSampler when
    distributed) with the TextBatch collate; sets ``num_samples`` / ``num_batches``."""
    from torch.utils.data.distributed import DistributedSampler

    sampler = DistributedSampler(dataset) if distributed else None
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=sampler is None,
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
            + (" per process" if distributed else "")
        )
    loader.num_samples = len(dataset)
    loader.num_batches = len(loader)
    return loader
