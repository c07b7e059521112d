"""The training dataset and collate function: views, budgets, owners, errors."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("mmengine")
from vlr_plugins.errors import DataFormatError, MissingEmbeddingsError  # noqa: E402
from vlr_plugins.integrations.mmengine.dataset import (  # noqa: E402
    ParagraphTextViewsDataset,
    RetrievalEvalDataset,
    vlr_text_views_collate,
)

CAPTION = {"field": "caption", "max_tokens": 77}
PARAGRAPH_SHORT = {"field": "paragraph", "max_tokens": 8}
ONE_RANDOM = {"field": "positives", "take": "random", "count": 2, "max_tokens": 77}
NEGATIVES = {"field": "hard_negatives", "max_tokens": 77}


def dataset(tiny_world, **kw):
    args = dict(ann_file=tiny_world["train"], image_embeddings=tiny_world["image_embeddings"],
                tokenizer=tiny_world["tokenizer"], positives=[CAPTION])
    args.update(kw)
    return ParagraphTextViewsDataset(**args)


def test_items_follow_the_views_and_budgets(tiny_world):
    ds = dataset(tiny_world, positives=[CAPTION, PARAGRAPH_SHORT, ONE_RANDOM], negatives=[NEGATIVES])
    tok = tiny_world["object"].tokenizer()
    sample = ds.samples[3]
    item = ds[3]
    assert item["id"] == sample.id
    assert len(item["pos"]) == 1 + 1 + 2 and len(item["neg"]) == len(sample.hard_negatives)
    assert item["pos"][0] == tok(sample.caption, truncation=True, max_length=77)["input_ids"]
    assert item["pos"][1] == tok(sample.paragraph, truncation=True, max_length=8)["input_ids"]
    assert len(item["pos"][1]) == 8 and item["pos"][1][-1] == tok.sep_token_id
    drawn = {tok.decode(ids, skip_special_tokens=True) for ids in item["pos"][2:]}
    assert drawn <= {tok.decode(tok(p)["input_ids"], skip_special_tokens=True) for p in sample.positives}
    from vlr_plugins.data import EmbeddingStore

    assert torch.equal(item["image_emb"], EmbeddingStore(tiny_world["image_embeddings"]).get([sample.id])[0])


def test_random_views_are_redrawn(tiny_world):
    ds = dataset(tiny_world, positives=[{"field": "positives", "take": "random", "count": 1, "max_tokens": 77}])
    draws = {tuple(ds[0]["pos"][0]) for _ in range(40)}
    assert len(draws) > 1


def test_collate_pads_one_block_with_owners(tiny_world):
    ds = dataset(tiny_world, positives=[CAPTION, ONE_RANDOM], negatives=[NEGATIVES])
    items = [ds[i] for i in range(3)]
    batch = vlr_text_views_collate(items, pad_token_id=0)
    n_pos = sum(len(it["pos"]) for it in items)
    n_neg = sum(len(it["neg"]) for it in items)
    assert batch["input_ids"].shape[0] == n_pos + n_neg
    assert batch["text_owner"].tolist() == [i for i, it in enumerate(items) for _ in it["pos"]]
    assert batch["neg_owner"].tolist() == [i for i, it in enumerate(items) for _ in it["neg"]]
    texts = [t for it in items for t in it["pos"]] + [t for it in items for t in it["neg"]]
    for row, t in enumerate(texts):
        assert batch["input_ids"][row, : len(t)].tolist() == t
        assert batch["attention_mask"][row].sum() == len(t)
        assert (batch["input_ids"][row, len(t):] == 0).all()
    assert batch["image_emb"].shape == (3, 32)


def test_fraction_keeps_a_seeded_subset(tiny_world):
    a = dataset(tiny_world, fraction=0.5, seed=3)
    b = dataset(tiny_world, fraction=0.5, seed=3)
    c = dataset(tiny_world, fraction=0.5, seed=4)
    assert len(a) == 24 and [s.id for s in a.samples] == [s.id for s in b.samples]
    assert [s.id for s in a.samples] != [s.id for s in c.samples]


def test_samples_lacking_a_view_are_named(tiny_world, tmp_path):
    lines = open(tiny_world["train"]).read().splitlines()
    rec = json.loads(lines[5])
    rec["paragraph"] = None
    lines[5] = json.dumps(rec)
    bad = tmp_path / "train.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError) as e:
        dataset(tiny_world, ann_file=str(bad), positives=[CAPTION, PARAGRAPH_SHORT])
    msg = str(e.value)
    assert str(bad) in msg and "record 6" in msg and "'paragraph'" in msg and rec["id"] in msg


def test_missing_embeddings_are_reported_together(tiny_world, tmp_path):
    lines = open(tiny_world["train"]).read().splitlines()
    recs = [json.loads(line) for line in lines[:4]]
    for i, r in enumerate(recs[:3]):
        r["id"] = f"unknown-{i}"
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with pytest.raises(MissingEmbeddingsError) as e:
        dataset(tiny_world, ann_file=str(path))
    assert all(f"unknown-{i}" in str(e.value) for i in range(3))


def test_eval_dataset_keeps_every_text_of_an_item(tiny_world):
    ds = RetrievalEvalDataset([{"name": "short", "ann_file": tiny_world["eval_short"], "max_tokens": 77}],
                              tokenizer=tiny_world["tokenizer"], image_embeddings=tiny_world["image_embeddings"])
    first = json.loads(open(tiny_world["eval_short"]).readline())
    item = ds[0]
    assert item["id"] == first["id"] and item["split"] == "short" and len(item["pos"]) == len(first["texts"])


def _store_copy(tiny_world, tmp_path):
    import shutil
    from pathlib import Path

    store = tmp_path / "store"
    shutil.copytree(Path(tiny_world["image_embeddings"]), store)
    return store, next(store.glob("*.safetensors"))


def test_a_damaged_shard_stops_construction_naming_it(tiny_world, tmp_path):
    store, shard = _store_copy(tiny_world, tmp_path)
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) - 64])
    with pytest.raises(DataFormatError, match=rf"^{shard}: "):
        dataset(tiny_world, image_embeddings=str(store))
    shard.unlink()
    from vlr_plugins.errors import MissingFileError

    with pytest.raises(MissingFileError, match=rf"is missing its shard {shard}$"):
        dataset(tiny_world, image_embeddings=str(store))


def test_samples_that_are_not_utf8_are_named_by_line(tiny_world, tmp_path):
    lines = open(tiny_world["train"], "rb").read().splitlines()
    lines[4] = lines[4].replace(b'"caption": "', b'"caption": "\xff', 1)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(DataFormatError, match=r"bad.jsonl, line 5: not UTF-8 text"):
        dataset(tiny_world, ann_file=str(bad))
