"""Datasets and the collate function of the text-only recipes, registered for MMEngine.

The logic lives in the core (``vlr_plugins.data``); this module only shapes items the
way an MMEngine data loader and ``TextOnlyRetrievalModel`` expect them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from vlr_plugins.data.embedding_store import EmbeddingStore
from vlr_plugins.data.retrieval_set import read_retrieval_jsonl
from vlr_plugins.data.sample import read_paragraph_samples
from vlr_plugins.data.text_views import ViewDraws, check_samples_have_views, draw_texts, seeded_fraction
from vlr_plugins.integrations.mmengine.registry import DATASETS, FUNCTIONS
from vlr_plugins.recipe import EvalSplit, TextView
from vlr_plugins.text.tokenizer import pad_token_rows, token_ids_at_budgets

__all__ = ["ParagraphTextViewsDataset", "RetrievalEvalDataset", "vlr_text_views_collate"]


def _as_views(views: Sequence[dict | TextView]) -> tuple[TextView, ...]:
    return tuple(v if isinstance(v, TextView) else TextView(**v) for v in views)


class _Tokenizing:
    """Loads the tokenizer lazily so the dataset pickles cheaply into workers."""

    tokenizer_path: str
    _tok: Any = None

    @property
    def tokenizer(self):
        if self._tok is None:
            from transformers import AutoTokenizer

            self._tok = AutoTokenizer.from_pretrained(self.tokenizer_path)
        return self._tok

    def _token_ids(self, texts_and_budgets: Sequence[tuple[str, int]]) -> list[list[int]]:
        return token_ids_at_budgets(self.tokenizer, [t for t, _ in texts_and_budgets],
                                    [b for _, b in texts_and_budgets])

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_tok"] = None
        state["_store_cache"] = {}
        return state


class _StoreCache:
    _store_cache: dict

    def _store(self, path: str) -> EmbeddingStore:
        if path not in self._store_cache:
            self._store_cache[path] = EmbeddingStore(path)
        return self._store_cache[path]


@DATASETS.register_module()
class ParagraphTextViewsDataset(_Tokenizing, _StoreCache, Dataset):
    """Training samples (paper sec. 3.1) -> image embedding + the recipe's texts.

    ``ann_file``: JSON Lines / Parquet of samples; ``image_embeddings``: an embedding
    store folder (``vlr precompute``); ``positives`` / ``negatives``: the recipe's text
    views; ``tokenizer``: a tokenizer folder or Hub name. Every sample is checked at
    construction against the views, and every id against the store (all missing ids
    reported at once). Random views are redrawn at every step, reproducibly for a seed.
    """

    def __init__(self, ann_file: str, image_embeddings: str, positives: Sequence[dict],
                 tokenizer: str, negatives: Sequence[dict] = (), fraction: float = 1.0,
                 seed: int = 0) -> None:
        self.ann_file, self.image_embeddings, self.tokenizer_path = ann_file, image_embeddings, tokenizer
        self.positives, self.negatives = _as_views(positives), _as_views(negatives)
        self.seed = seed
        self._store_cache: dict = {}
        samples = read_paragraph_samples(ann_file)
        check_samples_have_views(samples, (*self.positives, *self.negatives), ann_file)
        self.samples = seeded_fraction(samples, fraction, seed)
        self._store(image_embeddings).check([s.id for s in self.samples])
        self._view_draws = ViewDraws(seed)

    def __len__(self) -> int:
        return len(self.samples)

    def _rng(self, index: int) -> random.Random:
        return self._view_draws.rng(index)

    def __getitem__(self, index: int) -> dict[str, Any]:
        s = self.samples[index]
        rng = self._rng(index)
        pos = draw_texts(s, self.positives, rng)
        neg = draw_texts(s, self.negatives, rng)
        ids = self._token_ids([(d.text, d.max_tokens) for d in (*pos, *neg)])
        return {
            "id": s.id,
            "image_emb": self._store(self.image_embeddings).get([s.id])[0],
            "pos": ids[: len(pos)],
            "neg": ids[len(pos):],
        }


@DATASETS.register_module()
class RetrievalEvalDataset(_Tokenizing, _StoreCache, Dataset):
    """Retrieval splits (``{id, texts}`` JSON Lines) as items for ``RetrievalRecallMetric``.

    ``splits``: list of ``dict(name, ann_file, max_tokens, image_embeddings=None)``;
    ``image_embeddings`` is the default store for splits that do not name their own.
    """

    def __init__(self, splits: Sequence[dict], tokenizer: str, image_embeddings: str | None = None) -> None:
        self.tokenizer_path = tokenizer
        self._store_cache = {}
        self.items: list[tuple[EvalSplit, str, list[str]]] = []
        for cfg in splits:
            split = cfg if isinstance(cfg, EvalSplit) else EvalSplit(**cfg)
            store = split.image_embeddings or image_embeddings
            if store is None:
                raise ValueError(f"eval split {split.name!r} names no image_embeddings store")
            split = EvalSplit(split.name, split.ann_file, split.max_tokens, store)
            rs = read_retrieval_jsonl(split.ann_file, split.name)
            self._store(store).check(list(rs.item_ids))
            self.items += [(split, item_id, rs.texts_of(i)) for i, item_id in enumerate(rs.item_ids)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, Any]:
        split, item_id, texts = self.items[index]
        return {
            "id": item_id,
            "split": split.name,
            "image_emb": self._store(split.image_embeddings).get([item_id])[0],
            "pos": self._token_ids([(t, split.max_tokens) for t in texts]),
            "neg": [],
        }


@FUNCTIONS.register_module()
def vlr_text_views_collate(batch: Sequence[dict], pad_token_id: int = 0) -> dict[str, Any]:
    """Stack image embeddings (B, D); pad every text of the batch into one block.

    Positives come first (``text_owner`` (N,) gives each one's image), then hard
    negatives (``neg_owner`` (M,)); ``input_ids`` / ``attention_mask`` are (N+M, L).
    """
    texts: list[list[int]] = []
    owner: list[int] = []
    neg_owner: list[int] = []
    for i, b in enumerate(batch):
        texts += b["pos"]
        owner += [i] * len(b["pos"])
    for i, b in enumerate(batch):
        texts += b["neg"]
        neg_owner += [i] * len(b["neg"])
    input_ids, attention_mask = pad_token_rows(texts, pad_token_id)
    out = {
        "image_emb": torch.stack([b["image_emb"] for b in batch]),
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "text_owner": torch.tensor(owner, dtype=torch.long),
        "neg_owner": torch.tensor(neg_owner, dtype=torch.long),
        "ids": [b["id"] for b in batch],
    }
    if "split" in batch[0]:
        out["split"] = [b["split"] for b in batch]
    return out
