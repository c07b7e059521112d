"""The core datasets and the collate function of the text-only recipes, as MMEngine sees them.

The work lives in the core (:class:`vlr_plugins.data.TextViewsDataset`, the media
sources, the owner indices); this module only declares them in the scope's registries
with the constructor arguments a config gives, and shapes items the way an MMEngine
data loader and ``TextOnlyRetrievalModel`` expect them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from vlr_plugins.data.dataset import TextViewsDataset, TextViewsItem, concat_owned
from vlr_plugins.data.embedding_store import EmbeddingStore
from vlr_plugins.data.media import StoredEmbeddings
from vlr_plugins.data.retrieval_set import read_retrieval_jsonl
from vlr_plugins.data.sample import read_paragraph_samples
from vlr_plugins.data.text_views import TextView, TextViews
from vlr_plugins.errors import ConfigError, DataFormatError
from vlr_plugins.integrations.mmengine.registry import DATASETS, FUNCTIONS
from vlr_plugins.recipe import EvalSplit
from vlr_plugins.text.pretrained import load_tokenizer
from vlr_plugins.text.tokenizer import pad_token_rows, token_ids_at_budgets

__all__ = ["ParagraphTextViewsDataset", "RetrievalEvalDataset", "vlr_text_views_collate"]


def _as_views(views: Sequence[dict | TextView]) -> tuple[TextView, ...]:
    return tuple(v if isinstance(v, TextView) else TextView(**v) for v in views)


class _TokenIds:
    """Texts -> token ids at their budgets, with a tokenizer loaded on first use (so that
    what holds it pickles cheaply into data-loader workers)."""

    def __init__(self, tokenizer_path: str) -> None:
        self.tokenizer_path = tokenizer_path
        self._tok: Any = None

    @property
    def tokenizer(self) -> Any:
        if self._tok is None:
            self._tok = load_tokenizer(self.tokenizer_path, "tokenizer")
        return self._tok

    def __call__(self, texts: Sequence[str], budgets: Sequence[int]) -> list[list[int]]:
        return token_ids_at_budgets(self.tokenizer, list(texts), list(budgets))

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tok": None}


def read_one_row_per_shard(store: EmbeddingStore) -> None:
    """Read the first row of every shard of ``store``, so that a missing, truncated or
    corrupt shard is reported (naming the shard file) before training rather than by a
    data-loader worker mid-epoch. Shards are memory-mapped: this reads their headers and
    one row each."""
    index = json.loads((Path(store.path) / "index.json").read_text("utf-8"))
    start = 0
    for shard in index["shards"]:
        if shard["count"]:
            try:
                store.get([store.ids[start]])
            except FileNotFoundError:
                raise DataFormatError(Path(store.path) / shard["file"],
                                      "missing (the store's index.json lists it)") from None
        start += shard["count"]
    store.close()


def _read_samples(ann_file: str) -> list:
    """The training samples; a file that is not UTF-8 text is named with its first bad line."""
    try:
        return read_paragraph_samples(ann_file)
    except UnicodeDecodeError as e:
        with open(ann_file, "rb") as f:
            for line_no, line in enumerate(f, start=1):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError as bad:
                    raise DataFormatError(ann_file, f"not UTF-8 text: byte {bad.object[bad.start:bad.start + 1]!r} "
                                                    f"at column {bad.start + 1}", record=line_no) from None
        raise DataFormatError(ann_file, f"not UTF-8 text: {e.reason}") from None


class _TrainItem:
    """``TextViewsItem`` -> ``{"id", "image_emb", "pos", "neg"}`` (token ids per text)."""

    def __init__(self, tokenizer_path: str) -> None:
        self.token_ids = _TokenIds(tokenizer_path)

    def __call__(self, item: TextViewsItem) -> dict[str, Any]:
        drawn = (*item.positives, *item.negatives)
        ids = self.token_ids([d.text for d in drawn], [d.max_tokens for d in drawn])
        n = len(item.positives)
        return {"id": item.id, "image_emb": item.media, "pos": ids[:n], "neg": ids[n:]}


@DATASETS.register_module()
class ParagraphTextViewsDataset(TextViewsDataset):
    """Training samples (paper sec. 3.1) -> image embedding + the recipe's texts, tokenized.

    ``ann_file``: JSON Lines / Parquet / CSV of samples; ``image_embeddings``: an
    embedding store folder (``vlr precompute``); ``positives`` / ``negatives``: the
    recipe's text views; ``tokenizer``: a tokenizer folder or Hub name. Checks, data
    fraction and per-step draws are :class:`~vlr_plugins.data.TextViewsDataset`'s; the
    store's shards are read once each at construction (:func:`read_one_row_per_shard`),
    so a damaged one stops the run before its first step.
    """

    def __init__(self, ann_file: str, image_embeddings: str, positives: Sequence[dict],
                 tokenizer: str, negatives: Sequence[dict] = (), fraction: float = 1.0,
                 seed: int = 0) -> None:
        self.ann_file, self.image_embeddings, self.tokenizer_path = ann_file, image_embeddings, tokenizer
        media = StoredEmbeddings(image_embeddings)
        super().__init__(
            _read_samples(ann_file), TextViews(_as_views(positives), _as_views(negatives)),
            media, transform=_TrainItem(tokenizer), source=ann_file, fraction=fraction, seed=seed,
        )
        read_one_row_per_shard(media.store)


@DATASETS.register_module()
class RetrievalEvalDataset(Dataset):
    """Retrieval splits (``{id, texts}`` JSON Lines) as items for ``RetrievalRecallMetric``.

    ``splits``: list of ``dict(name, ann_file, max_tokens, image_embeddings=None)``;
    ``image_embeddings`` is the default store for splits that do not name their own.
    """

    def __init__(self, splits: Sequence[dict], tokenizer: str, image_embeddings: str | None = None) -> None:
        self.token_ids = _TokenIds(tokenizer)
        self.items: list[tuple[EvalSplit, StoredEmbeddings, str, list[str]]] = []
        stores: dict[str, StoredEmbeddings] = {}
        for cfg in splits:
            split = cfg if isinstance(cfg, EvalSplit) else EvalSplit(**cfg)
            path = split.image_embeddings or image_embeddings
            if path is None:
                raise ConfigError(f"eval split {split.name!r} names no image_embeddings store")
            if path not in stores:
                stores[path] = StoredEmbeddings(path)
                read_one_row_per_shard(stores[path].store)
            store = stores[path]
            rs = read_retrieval_jsonl(split.ann_file, split.name)
            store.store.check(list(rs.item_ids))
            self.items += [(split, store, item_id, rs.texts_of(i)) for i, item_id in enumerate(rs.item_ids)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Any]:
        split, store, item_id, texts = self.items[index]
        return {
            "id": item_id,
            "split": split.name,
            "image_emb": store.store.get([item_id])[0],
            "pos": self.token_ids(texts, [split.max_tokens] * len(texts)),
            "neg": [],
        }


@FUNCTIONS.register_module()
def vlr_text_views_collate(batch: Sequence[dict], pad_token_id: int = 0) -> dict[str, Any]:
    """Stack image embeddings (B, D); pad every text of the batch into one block.

    Positives come first (``text_owner`` (N,) gives each one's image), then hard
    negatives (``neg_owner`` (M,)); ``input_ids`` / ``attention_mask`` are (N+M, L).
    """
    pos, owner = concat_owned([b["pos"] for b in batch])
    neg, neg_owner = concat_owned([b["neg"] for b in batch])
    input_ids, attention_mask = pad_token_rows(pos + neg, pad_token_id)
    out = {
        "image_emb": torch.stack([b["image_emb"] for b in batch]),
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "text_owner": owner,
        "neg_owner": neg_owner,
        "ids": [b["id"] for b in batch],
    }
    if "split" in batch[0]:
        out["split"] = [b["split"] for b in batch]
    return out
