"""The one text-views dataset: checks, fraction, per-step draws, media, transforms, owners."""

from __future__ import annotations

import pickle
import random
from dataclasses import dataclass

import pytest
import torch
from torch.utils.data import DataLoader

from vlr_plugins.data import (
    EmbeddingStoreWriter,
    ParagraphSample,
    StoredEmbeddings,
    TextView,
    TextViews,
    TextViewsDataset,
    TextViewsItem,
    concat_owned,
    owner_index,
)
from vlr_plugins.data.text_views import seeded_fraction
from vlr_plugins.errors import DataFormatError, MissingEmbeddingsError

SAMPLES = [
    ParagraphSample(id=f"s{i}", caption=f"caption {i}", positives=tuple(f"pos {i}.{k}" for k in range(4)),
                    hard_negatives=(f"neg {i}",), paragraph=f"paragraph {i}")
    for i in range(12)
]
VIEWS = TextViews(
    positives=(TextView("caption", 77), TextView("positives", 40, "random", 2)),
    negatives=(TextView("hard_negatives", 77),),
)


@pytest.fixture
def store(tmp_path):
    emb = torch.randn(len(SAMPLES), 8)
    with EmbeddingStoreWriter(tmp_path / "store", 8) as w:
        w.add([s.id for s in SAMPLES], emb)
    return str(tmp_path / "store"), emb


def test_items_hold_the_media_and_the_views_draws(store):
    path, emb = store
    ds = TextViewsDataset(SAMPLES, VIEWS, StoredEmbeddings(path), source="train.jsonl")
    item = ds[3]
    assert isinstance(item, TextViewsItem) and (item.index, item.id) == (3, "s3")
    assert torch.equal(item.media, emb[3])
    assert [(d.text, d.max_tokens) for d in item.positives[:1]] == [("caption 3", 77)]
    drawn = [d.text for d in item.positives[1:]]
    assert len(drawn) == 2 == len(set(drawn)) and set(drawn) <= set(SAMPLES[3].positives)
    assert {d.max_tokens for d in item.positives[1:]} == {40}
    assert [d.text for d in item.negatives] == ["neg 3"]


def test_a_transform_shapes_the_item_and_text_only_needs_no_media():
    ds = TextViewsDataset(SAMPLES, VIEWS, transform=lambda it: (it.id, len(it.positives)))
    assert ds[0] == ("s0", 3) and len(ds) == 12
    assert TextViewsDataset(SAMPLES, VIEWS).item(0).media is None


def test_the_fraction_is_the_seeded_subset_and_draws_repeat_for_a_seed(store):
    path, _ = store
    ds = TextViewsDataset(SAMPLES, VIEWS, StoredEmbeddings(path), fraction=0.5, seed=3)
    assert ds.samples == seeded_fraction(SAMPLES, 0.5, 3) and len(ds) == 6

    def run(seed, epochs=2):  # a fresh run: a new dataset, torch seeded as the trainers do
        fresh = TextViewsDataset(SAMPLES, VIEWS, StoredEmbeddings(path), fraction=0.5, seed=3)
        torch.manual_seed(seed)
        return [[tuple(d.text for d in fresh[i].positives) for i in range(len(fresh))] for _ in range(epochs)]

    assert run(0) == run(0) and run(0) != run(1)
    first, second = run(0)
    assert first != second  # redrawn every step: the second epoch draws anew


def test_samples_and_media_are_checked_before_the_first_step(store, tmp_path):
    path, _ = store
    lacking = [*SAMPLES[:2], ParagraphSample(id="s2", caption="c", positives=("only one",))]
    with pytest.raises(DataFormatError, match=r"train.jsonl, record 3, field 'positives'.*needs 2"):
        TextViewsDataset(lacking, VIEWS, StoredEmbeddings(path), source="train.jsonl")
    unknown = [*SAMPLES[:2], *(ParagraphSample(id=f"new{i}", caption="c", positives=("a", "b"),
                                               hard_negatives=("n",)) for i in range(3))]
    with pytest.raises(MissingEmbeddingsError) as e:
        TextViewsDataset(unknown, VIEWS, StoredEmbeddings(path))
    assert e.value.missing == ["new0", "new1", "new2"]


def test_workers_load_through_pickled_copies(store):
    path, emb = store
    ds = TextViewsDataset(SAMPLES, VIEWS, StoredEmbeddings(path), transform=_media_and_ids)
    ds[0]  # the main process opens the store first
    pickle.loads(pickle.dumps(ds))
    torch.manual_seed(0)
    loader = DataLoader(ds, batch_size=4, num_workers=2, collate_fn=list)
    rows = [row for batch in loader for row in batch]
    assert [i for i, _ in rows] == [s.id for s in SAMPLES]
    assert torch.equal(torch.stack([m for _, m in rows]), emb)


def _media_and_ids(item: TextViewsItem):
    return item.id, item.media


def test_owners_index_the_flattened_batch():
    groups = [["a", "b"], [], ["c"], ["d", "e", "f"]]
    flat, owner = concat_owned(groups)
    reference = [i for i, g in enumerate(groups) for _ in g]
    assert flat == list("abcdef") and owner.tolist() == reference and owner.dtype == torch.long
    assert owner_index([0, 0]).tolist() == [] and owner_index([3]).tolist() == [0, 0, 0]


@dataclass(frozen=True)
class MultiViewSample:
    """A corpus with other fields (MVC-like: original, summaries, refined detailed captions)."""

    id: str
    fields: dict

    def texts(self, field):
        return tuple(self.fields.get(field, ()))

    def __hash__(self):
        return hash(self.id)


def test_another_corpus_with_named_candidate_views_is_configuration_only():
    samples = [MultiViewSample(f"v{i}", {"O": [f"o{i}"], "S1": [f"s1-{i}"], "S2": [f"s2-{i}"],
                                         "D1*": [f"d1-{i}"], "P1": [f"p1-{i}"]}) for i in range(4)]
    views = TextViews((TextView(("O", "S1", "S2"), 128, "random", 1, name="summary"),
                       TextView(("D1*", "D2*", "P1", "P2"), 128, "random", 1, name="detailed")))
    ds = TextViewsDataset(samples, views)
    rng_counts: dict[str, int] = {}
    torch.manual_seed(0)
    for _ in range(300):
        summary, detailed = ds[1].positives
        assert (summary.view, detailed.view) == ("summary", "detailed")
        assert summary.text in ("o1", "s1-1", "s2-1") and detailed.text in ("d1-1", "p1-1")
        rng_counts[summary.text] = rng_counts.get(summary.text, 0) + 1
    assert set(rng_counts) == {"o1", "s1-1", "s2-1"} and min(rng_counts.values()) > 60  # ~100 each


def test_draws_are_independent_of_the_random_module_state():
    torch.manual_seed(5)
    a = [d.text for d in TextViewsDataset(SAMPLES, VIEWS)[0].positives]
    random.seed(123)
    torch.manual_seed(5)
    assert [d.text for d in TextViewsDataset(SAMPLES, VIEWS)[0].positives] == a
