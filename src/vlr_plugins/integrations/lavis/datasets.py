"""LAVIS dataset builders over the package's readers and embedding store.

``vlr_paragraph``: the paper's training samples (JSON Lines / Parquet, ``vlr_plugins.data``)
with their image embeddings from an embedding store, drawn into the recipe's text views.
``vlr_retrieval`` (any registered reader) and ``vlr_flickr30k``, ``vlr_coco_karpathy``,
``vlr_sharegpt4v``, ``vlr_docci`` (defaults filled in): evaluation benchmarks, each split
one file under ``build_info.annotations``, scored against stored item embeddings and/or
the images under ``build_info.images`` (needed for ITM re-ranking).

Every builder ships its default YAML in this package (LAVIS resolves a builder's default
config relative to its own folder, so absolute paths are used). Relative data paths in a
run config are taken relative to the working directory. A value left at ``???`` must be
set; the error names the config key.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from lavis.common.registry import registry
from lavis.datasets.builders.base_dataset_builder import BaseDatasetBuilder
from lavis.processors.blip_processors import BlipCaptionProcessor
from omegaconf import OmegaConf
from torch.utils.data import Dataset

from vlr_plugins.data.dataset import TextViewsDataset, TextViewsItem, concat_owned
from vlr_plugins.data.embedding_store import EmbeddingStore
from vlr_plugins.data.media import StoredEmbeddings
from vlr_plugins.data.retrieval_set import RetrievalSet
from vlr_plugins.data.sample import read_paragraph_samples
from vlr_plugins.integrations.lavis._registry import register
from vlr_plugins.integrations.lavis.model import CONFIG_DIR
from vlr_plugins.recipe import RecipeError, TextViews, build_text_views

__all__ = ["VlrParagraphDataset", "VlrRetrievalEvalDataset", "VlrRetrievalSuite",
           "VlrParagraphBuilder", "VlrRetrievalBuilder", "config_file"]

log = logging.getLogger(__name__)


def config_file() -> str:
    """The run config being built (for error messages), when LAVIS' ``Config`` made one."""
    conf = registry.get("configuration", no_warning=True)
    return str(getattr(getattr(conf, "args", None), "cfg_path", None) or "<LAVIS run config>")


def _optional(cfg, key: str) -> Any:
    """``cfg[key]`` (dotted), or ``None`` when absent, null or left at ``???``."""
    node = cfg
    for part in key.split("."):
        if node is None or part not in node or OmegaConf.is_missing(node, part):
            return None
        node = node[part]
    return node


def _need(cfg, key: str, where: str, what: str) -> Any:
    """``cfg[key]`` (dotted); a missing, null or ``???`` value is an error naming the key."""
    node = _optional(cfg, key)
    if node is None:
        raise RecipeError(config_file(), f"{where}.{key}", f"missing: {what}")
    return node


def _path(p: str) -> str:
    return os.path.abspath(os.path.expanduser(str(p)))


def _warn_word_cut(processor: Any, budget: int, where: str) -> None:
    if isinstance(processor, BlipCaptionProcessor) and processor.max_words * 1.3 < budget:
        warnings.warn(f"{where}: LAVIS' blip_caption cuts texts at {processor.max_words} words, "
                      f"well below the {budget}-token budget; use the 'vlr_text' processor", stacklevel=3)


class _Builder(BaseDatasetBuilder):
    """No download step (the data is the user's); processors from the config."""

    name: str = ""

    @classmethod
    def default_config_path(cls, type: str = "default") -> str:
        return str(CONFIG_DIR / "datasets" / f"{cls.name}.yaml")

    def _download_data(self) -> None:
        pass

    def build_datasets(self):
        self.build_processors()
        return self.build()


# --------------------------------------------------------------------------- training


class _LavisTexts:
    """``TextViewsItem`` -> LAVIS' sample dict: ``image_emb``, ``image_id`` and each text through
    LAVIS' text processor, with its budget (``text_input`` / ``text_max_len``, ``neg_*``)."""

    def __init__(self, text_processor=None) -> None:
        self.text_processor = text_processor

    def __call__(self, item: TextViewsItem) -> dict[str, Any]:
        process = self.text_processor or (lambda t: t)
        return {
            "image_emb": item.media,
            "image_id": item.index,
            "id": item.id,
            "text_input": [process(d.text) for d in item.positives],
            "text_max_len": [d.max_tokens for d in item.positives],
            "neg_input": [process(d.text) for d in item.negatives],
            "neg_max_len": [d.max_tokens for d in item.negatives],
        }


class VlrParagraphDataset(TextViewsDataset):
    """Training samples -> ``image_emb`` + the texts of the recipe's views with their budgets.

    :class:`~vlr_plugins.data.TextViewsDataset` (checks, data fraction, per-step draws, as
    under MMEngine and open_clip) over stored image embeddings, shaped for LAVIS' runner.
    """

    def __init__(self, ann_file: str, image_embeddings: str, views: TextViews, text_processor=None,
                 fraction: float = 1.0, seed: int = 0) -> None:
        self.ann_file, self.image_embeddings = ann_file, image_embeddings
        super().__init__(read_paragraph_samples(ann_file), views, StoredEmbeddings(image_embeddings),
                         transform=_LavisTexts(text_processor), source=ann_file, fraction=fraction, seed=seed)

    @staticmethod
    def collater(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Flatten every sample's texts; ``text_owner`` / ``neg_owner`` give each one's row."""
        out: dict[str, Any] = {"image_emb": torch.stack([s["image_emb"] for s in samples]),
                               "image_id": torch.tensor([s["image_id"] for s in samples]),
                               "id": [s["id"] for s in samples]}
        for kind, owner in (("text", "text_owner"), ("neg", "neg_owner")):
            pairs, out[owner] = concat_owned(
                [list(zip(s[f"{kind}_input"], s[f"{kind}_max_len"])) for s in samples])
            out[f"{kind}_input"] = [t for t, _ in pairs]
            out[f"{kind}_max_len"] = [b for _, b in pairs]
        return out


def _views(cfg, where: str) -> TextViews:
    raw = _need(cfg, "text_views", where, "the recipe's text views (positives, negatives)")
    return build_text_views(OmegaConf.to_container(raw, resolve=True), config_file(), f"{where}.text_views")


@register("builder", "vlr_paragraph")
class VlrParagraphBuilder(_Builder):
    """The paper's training format: samples + an image-embedding store + text views."""

    name = "vlr_paragraph"
    train_dataset_cls = VlrParagraphDataset

    def build(self) -> dict[str, Dataset]:
        where = f"datasets.{self.name}"
        views = _views(self.config, where)
        for v in (*views.positives, *views.negatives):
            _warn_word_cut(self.text_processors["train"], v.max_tokens, where)
        anns = _need(self.config, "build_info.annotations", where, "the training samples file")
        store = _need(self.config, "build_info.image_embeddings.storage", where,
                      "the image-embedding store (vlr precompute)")
        fraction = float(self.config.get("fraction", 1.0))
        if not 0.0 < fraction <= 1.0:
            raise RecipeError(config_file(), f"{where}.fraction", f"expected 0 < fraction <= 1, found {fraction}")
        out = {}
        for split in anns:
            ann = _need(self.config, f"build_info.annotations.{split}.storage", where, "a samples file")
            out[split] = VlrParagraphDataset(
                _path(ann), _path(store), views, self.text_processors["train" if split == "train" else "eval"],
                fraction=fraction, seed=int(self.config.get("seed", 0)))
        return out

    @property
    def views(self) -> TextViews:
        return _views(self.config, f"datasets.{self.name}")


# --------------------------------------------------------------------------- evaluation


class VlrRetrievalEvalDataset(Dataset):
    """One benchmark split: a ``RetrievalSet`` (texts owned by items), its token budget,
    its stored item embeddings and/or its images.

    Items yield ``{"index": i}`` plus ``image`` when images are configured. For LAVIS'
    own code the split also exposes ``text``, ``image``, ``txt2img`` and ``img2txt``.
    """

    def __init__(self, rs: RetrievalSet, max_tokens: int, item_embeddings: str | None = None,
                 vis_processor=None, text_processor=None, with_images: bool = False) -> None:
        if item_embeddings is None and not with_images:
            raise ValueError(f"{rs.name}: give build_info.item_embeddings and/or build_info.images")
        self.rs, self.name, self.max_tokens = rs, rs.name, int(max_tokens)
        self.item_embeddings = item_embeddings
        self.vis_processor, self.with_images = vis_processor, with_images
        tp = text_processor or (lambda t: t)
        self.text = [tp(t) for t in rs.texts]
        self.image = list(rs.item_ids)
        self.text_owner = rs.text_owner
        self.txt2img = {t: int(o) for t, o in enumerate(rs.text_owner.tolist())}
        self.img2txt: dict[int, list[int]] = {}
        for t, o in self.txt2img.items():
            self.img2txt.setdefault(o, []).append(t)
        if item_embeddings is not None:
            EmbeddingStore(item_embeddings).check(self.image)

    def item_embeddings_tensor(self) -> torch.Tensor:
        return EmbeddingStore(self.item_embeddings).get(self.image)

    def __len__(self) -> int:
        return len(self.image)

    def __getitem__(self, index: int) -> dict[str, Any]:
        out: dict[str, Any] = {"index": index}
        if self.with_images:
            from PIL import Image

            with Image.open(self.rs.media_paths()[index]) as im:
                out["image"] = self.vis_processor(im.convert("RGB"))
        return out

    @staticmethod
    def collater(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"index": torch.tensor([s["index"] for s in samples])}
        if "image" in samples[0]:
            out["image"] = torch.stack([s["image"] for s in samples])
        return out


class VlrRetrievalSuite(Dataset):
    """Several benchmarks as LAVIS' one dataset of a split (LAVIS takes one per split);
    ``vlr_retrieval`` scores each and reports ``<name>/txt_r1`` ... and their mean."""

    def __init__(self, benchmarks: Sequence[VlrRetrievalEvalDataset]) -> None:
        self.benchmarks = list(benchmarks)
        self._offsets = [0]
        for b in self.benchmarks:
            self._offsets.append(self._offsets[-1] + len(b))

    def __len__(self) -> int:
        return self._offsets[-1]

    def __getitem__(self, index: int) -> dict[str, Any]:
        for b, (lo, hi) in enumerate(zip(self._offsets, self._offsets[1:])):
            if lo <= index < hi:
                return {**self.benchmarks[b][index - lo], "bench": b}
        raise IndexError(index)

    @staticmethod
    def collater(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"index": torch.tensor([s["index"] for s in samples]),
                               "bench": torch.tensor([s["bench"] for s in samples])}
        if all("image" in s for s in samples):
            out["image"] = torch.stack([s["image"] for s in samples])
        return out


@register("builder", "vlr_retrieval")
class VlrRetrievalBuilder(_Builder):
    """A retrieval benchmark read by any registered reader (``reader:``, ``reader_args:``).

    ``build_info.annotations.<split>``: ``storage`` (the benchmark's own annotation file)
    and ``args`` (reader arguments for that split, e.g. ``{split: test}``);
    ``build_info.item_embeddings.storage``: its stored item embeddings;
    ``build_info.images.storage``: its image folder (for ITM re-ranking, or to encode the
    images with the model's ViT); ``max_tokens``: the texts' token budget.
    """

    name = "vlr_retrieval"
    reader: str | None = None

    def build(self) -> dict[str, Dataset]:
        from vlr_plugins.registry import READERS

        where = f"datasets.{self.name}"
        reader = self.reader
        if "reader" in self.config and not OmegaConf.is_missing(self.config, "reader"):
            reader = self.config.reader or reader
        if not reader:
            raise RecipeError(config_file(), f"{where}.reader", f"missing: one of {', '.join(READERS.names())}")
        if reader not in READERS:
            raise RecipeError(config_file(), f"{where}.reader",
                              f"unknown reader {reader!r}; registered: {', '.join(READERS.names())}")
        budget = int(_need(self.config, "max_tokens", where, "the texts' token budget"))
        _warn_word_cut(self.text_processors["eval"], budget, where)
        info = _need(self.config, "build_info", where, "annotations / item_embeddings / images")
        store, images = _optional(info, "item_embeddings.storage"), _optional(info, "images.storage")
        if not store and not images:
            raise RecipeError(config_file(), f"{where}.build_info.item_embeddings.storage",
                              "missing: stored item embeddings (vlr precompute), or images under "
                              "build_info.images.storage")
        name = _optional(self.config, "name") or reader
        out = {}
        for split in _need(info, "annotations", where + ".build_info", "one file per split"):
            ann = _need(info, f"annotations.{split}.storage", where + ".build_info", "the annotation file")
            args = OmegaConf.to_container(info.annotations[split].get("args") or OmegaConf.create(), resolve=True)
            if images:
                args = {**args, "media_root": _path(images), "check_media": True}
            read = READERS.get(reader)
            try:
                inspect.signature(read).bind(ann, **args)
            except TypeError as e:
                raise RecipeError(config_file(), f"{where}.build_info.annotations.{split}.args",
                                  f"{e} (reader {reader!r} takes {inspect.signature(read)})") from None
            rs = read(_path(ann), **args)
            out[split] = VlrRetrievalEvalDataset(
                dataclasses.replace(rs, name=name),
                budget, _path(store) if store else None, self.vis_processors["eval"],
                self.text_processors["eval"], with_images=bool(images))
        return out


def _benchmark_builder(reader: str) -> type[VlrRetrievalBuilder]:
    cls = type(f"Vlr_{reader}_Builder", (VlrRetrievalBuilder,),
               {"name": f"vlr_{reader}", "reader": reader, "__module__": __name__,
                "__doc__": f"``vlr_retrieval`` with the {reader!r} reader and the paper's defaults."})
    return register("builder", f"vlr_{reader}")(cls)


# the paragraph paper's four benchmarks, with their default YAMLs in configs/datasets/
BENCHMARK_BUILDERS = {r: _benchmark_builder(r) for r in ("flickr30k", "coco_karpathy", "sharegpt4v", "docci")}
