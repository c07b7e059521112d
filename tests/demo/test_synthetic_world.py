"""SyntheticWorld: the demo's attribute world, checked by parsing its texts back into attributes."""

from __future__ import annotations

import dataclasses
import doctest
import json
import re

import pytest
import torch

pytest.importorskip("transformers")

from vlr_plugins.data import EmbeddingStore, read_paragraph_samples  # noqa: E402
from vlr_plugins.demo import synthetic_world as world_module  # noqa: E402
from vlr_plugins.demo.synthetic_world import SyntheticWorld, SyntheticWorldConfig  # noqa: E402
from vlr_plugins.text import words_of  # noqa: E402

SMALL = SyntheticWorldConfig(seed=3, num_train=300, num_eval=60, dim=64)


@pytest.fixture(scope="module")
def world() -> SyntheticWorld:
    return SyntheticWorld(SMALL)


@pytest.fixture(scope="module")
def default_world() -> SyntheticWorld:
    return SyntheticWorld()


def mentioned(world: SyntheticWorld, text: str) -> dict[str, set[str]]:
    """attribute -> the values whose words occur in ``text``."""
    words = words_of([text])
    return {
        attr: {value for value, forms in values.items() if words & set(forms)}
        for attr, values in world.attributes.items()
    }


def named_values(world: SyntheticWorld, text: str) -> dict[str, str]:
    """attribute -> value for the attributes ``text`` names; at most one value each."""
    found = mentioned(world, text)
    assert all(len(v) <= 1 for v in found.values()), (text, found)
    return {attr: next(iter(v)) for attr, v in found.items() if v}


def all_texts(world: SyntheticWorld) -> list[str]:
    texts = []
    for s in world.train_samples():
        texts += [s.caption, *s.positives, *s.hard_negatives, s.paragraph]
    for split in ("short", "long"):
        texts += [t for r in world.eval_split(split) for t in r["texts"]]
    return texts


def sentences(paragraph: str) -> list[str]:
    return [s for s in re.split(r"(?<=\.)\s+", paragraph.strip()) if s]


def test_same_seed_same_world_and_other_seed_other_world(world):
    again = SyntheticWorld(SMALL)
    assert again.train_samples() == world.train_samples()
    for split in ("short", "long"):
        assert again.eval_split(split) == world.eval_split(split)
    ids, emb = world.image_embeddings()
    ids2, emb2 = again.image_embeddings()
    assert ids == ids2 and torch.equal(emb, emb2)

    other = SyntheticWorld(dataclasses.replace(SMALL, seed=4))
    assert [s.caption for s in other.train_samples()] != [s.caption for s in world.train_samples()]
    assert other.eval_split("long") != world.eval_split("long")
    assert not torch.allclose(other.image_embeddings()[1], emb)


def test_eval_images_do_not_depend_on_the_training_set_size(world):
    bigger = SyntheticWorld(dataclasses.replace(SMALL, num_train=SMALL.num_train + 50))
    assert bigger.eval_split("long") == world.eval_split("long")
    n = SMALL.num_eval
    assert torch.equal(bigger.image_embeddings()[1][-n:], world.image_embeddings()[1][-n:])
    assert bigger.train_samples()[: SMALL.num_train] == world.train_samples()


def test_ids_are_unique_and_eval_is_held_out(world):
    train = [s.id for s in world.train_samples()]
    short = [r["id"] for r in world.eval_split("short")]
    long = [r["id"] for r in world.eval_split("long")]
    assert len(set(train)) == SMALL.num_train and len(set(short)) == SMALL.num_eval
    assert short == long
    assert not set(train) & set(short)
    assert world.image_embeddings()[0] == train + short


def test_every_text_tokenizes_without_unk(world):
    tok = world.tokenizer()
    texts = all_texts(world)
    ids = tok(texts)["input_ids"]
    unknown = [t for t, row in zip(texts, ids) if tok.unk_token_id in row]
    assert unknown == []


def test_eval_long_uses_only_words_and_not_sentences_of_training(default_world):
    train = default_world.train_samples()
    train_texts = [t for s in train for t in (s.caption, *s.positives, s.paragraph)]
    long = [r["texts"][0] for r in default_world.eval_split("long")]
    assert words_of(long) <= words_of(train_texts)
    # DOCCI-like: other sentence frames, so no long-description sentence is a training one
    train_sentences = {s for sample in train for s in sentences(sample.paragraph)}
    assert not {s for text in long for s in sentences(text)} & train_sentences


def test_captions_name_one_or_two_of_the_image_values(world):
    for s in world.train_samples():
        truth = world.image_attributes(s.id)
        for text in (s.caption, *s.positives):
            named = named_values(world, text)
            assert 1 <= len(named) <= 2, text
            assert all(truth[a] == v for a, v in named.items()), (text, truth)
        assert len({s.caption, *s.positives}) == 1 + len(s.positives) == 6
    for r in world.eval_split("short"):
        truth = world.image_attributes(r["id"])
        assert len(set(r["texts"])) == len(r["texts"]) == 5
        for text in r["texts"]:
            named = named_values(world, text)
            assert 1 <= len(named) <= 2 and all(truth[a] == v for a, v in named.items()), text


def test_paragraphs_and_long_descriptions_name_every_value_and_no_other(world):
    attrs = list(world.attributes)
    for s in world.train_samples():
        truth = world.image_attributes(s.id)
        assert named_values(world, s.paragraph) == truth, s.paragraph
        assert 3 <= len(sentences(s.paragraph)) <= 6, s.paragraph
        assert 5.0 <= s.score <= 10.0
    for r in world.eval_split("long"):
        (text,) = r["texts"]
        assert named_values(world, text) == world.image_attributes(r["id"]), text
        assert 3 <= len(sentences(text)) <= 5, text
    assert len(attrs) == 6 and all(6 <= len(v) <= 12 for v in world.attributes.values())


def test_long_descriptions_identify_one_eval_image(world):
    combos = [tuple(world.image_attributes(r["id"]).values()) for r in world.eval_split("long")]
    assert len(set(combos)) == len(combos)


def test_hard_negatives_change_exactly_one_named_value_to_a_wrong_one(world):
    for s in world.train_samples():
        truth = world.image_attributes(s.id)
        original = named_values(world, s.caption)
        assert len(set(s.hard_negatives)) == len(s.hard_negatives) == 5
        for neg in s.hard_negatives:
            changed = named_values(world, neg)
            assert changed.keys() == original.keys(), (s.caption, neg)
            diff = [a for a in original if changed[a] != original[a]]
            assert len(diff) == 1, (s.caption, neg)
            assert changed[diff[0]] != truth[diff[0]]
            # "shaped like the original": same words apart from the changed value's
            assert len(neg.split()) == len(s.caption.split())


def test_image_embeddings_are_unit_norm_projections_of_the_attributes(world):
    ids, emb = world.image_embeddings()
    assert emb.dtype == torch.float32 and emb.shape == (len(ids), SMALL.dim)
    assert torch.allclose(emb.norm(dim=1), torch.ones(len(ids)), atol=1e-5)
    total_values = sum(len(v) for v in world.attributes.values())
    # without noise every embedding lies in the span of the projection's columns
    clean = SyntheticWorld(dataclasses.replace(SMALL, noise=0.0, dim=128)).image_embeddings()[1]
    assert torch.linalg.matrix_rank(clean) <= total_values
    noisy = SyntheticWorld(dataclasses.replace(SMALL, noise=0.05, dim=128)).image_embeddings()[1]
    assert torch.linalg.matrix_rank(noisy) > total_values
    # images that share more attribute values are closer
    sim = emb[:200] @ emb[:200].T
    values = [list(world.image_attributes(i).values()) for i in ids[:200]]
    shared = torch.tensor([[sum(x == y for x, y in zip(u, v)) for v in values] for u in values])
    off = ~torch.eye(200, dtype=torch.bool)
    means = [sim[off & (shared == k)].mean() for k in range(0, 4) if (off & (shared == k)).any()]
    assert all(x < y for x, y in zip(means, means[1:]))


def test_write_round_trips(world, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    paths = world.write(tmp_path / "world")
    names = {"train", "eval_short", "eval_long", "image_embeddings", "tokenizer", "world"}
    assert set(paths) == names
    assert read_paragraph_samples(paths["train"]) == world.train_samples()
    for split in ("short", "long"):
        lines = paths[f"eval_{split}"].read_text("utf-8").splitlines()
        assert [json.loads(line) for line in lines] == world.eval_split(split)
    ids, emb = world.image_embeddings()
    store = EmbeddingStore(paths["image_embeddings"])
    assert list(store.ids) == ids and torch.equal(store.get(ids), emb)
    store.close()
    texts = [r["texts"][0] for r in world.eval_split("long")]
    loaded = AutoTokenizer.from_pretrained(paths["tokenizer"])
    assert loaded(texts)["input_ids"] == world.tokenizer()(texts)["input_ids"]
    meta = json.loads(paths["world"].read_text("utf-8"))
    assert meta["config"] == dataclasses.asdict(SMALL)
    assert meta["attributes"] == {a: {v: list(f) for v, f in vs.items()}
                                  for a, vs in world.attributes.items()}
    assert meta["images"][ids[0]] == world.image_attributes(ids[0])
    assert not [p for p in (tmp_path / "world").iterdir() if p.name.startswith(".")]

    with pytest.raises(FileExistsError, match="overwrite=True"):
        world.write(tmp_path / "world")
    other = SyntheticWorld(dataclasses.replace(SMALL, seed=9))
    other.write(tmp_path / "world", overwrite=True)
    assert read_paragraph_samples(paths["train"]) == other.train_samples()
    replaced = EmbeddingStore(paths["image_embeddings"])
    assert torch.equal(replaced.get(ids), other.image_embeddings()[1])
    replaced.close()


@pytest.fixture(scope="module")
def long_world() -> SyntheticWorld:
    return SyntheticWorld(dataclasses.replace(SMALL, description_tokens=128))


def test_description_tokens_spread_the_attributes_over_the_whole_length(world, long_world):
    tok = long_world.tokenizer()
    for s in long_world.train_samples():
        assert named_values(long_world, s.paragraph) == long_world.image_attributes(s.id), s.paragraph
    long = [r["texts"][0] for r in long_world.eval_split("long")]
    for r, text in zip(long_world.eval_split("long"), long):
        assert named_values(long_world, text) == long_world.image_attributes(r["id"]), text
    texts = [s.paragraph for s in long_world.train_samples()] + long
    lengths = [len(row) for row in tok(texts)["input_ids"]]
    assert all(100 < n <= 128 for n in lengths), (min(lengths), max(lengths))
    # the first and the last sentence name attributes: whatever cuts the text short loses some
    for text in long:
        first, *_, last = sentences(text)
        assert named_values(long_world, first) and named_values(long_world, last), text
        cut = tok.decode(tok(text, truncation=True, max_length=100)["input_ids"], skip_special_tokens=True)
        assert len(named_values(long_world, cut)) < 6, text
    # nothing else changes: captions, the short split and the images are those of the plain world
    assert [s.caption for s in long_world.train_samples()] == [s.caption for s in world.train_samples()]
    assert long_world.eval_split("short") == world.eval_split("short")
    assert torch.equal(long_world.image_embeddings()[1], world.image_embeddings()[1])


def test_long_descriptions_with_detail_use_training_words_not_training_sentences(long_world):
    train = long_world.train_samples()
    long = [r["texts"][0] for r in long_world.eval_split("long")]
    assert words_of(long) <= words_of([s.paragraph for s in train])
    train_sentences = {s for sample in train for s in sentences(sample.paragraph)}
    assert not {s for text in long for s in sentences(text)} & train_sentences
    assert set(long_world.vocabulary()) == set(SyntheticWorld(SMALL).vocabulary())


@pytest.mark.parametrize("bad", [
    {"num_train": 0}, {"num_eval": -1}, {"dim": 2.5}, {"seed": True}, {"noise": -0.1},
    {"noise": float("nan")}, {"num_eval": 10**6}, {"description_tokens": -1},
])
def test_config_rejects_bad_values(bad):
    with pytest.raises(ValueError, match="SyntheticWorldConfig"):
        SyntheticWorldConfig(**bad)


def test_unknown_split_is_an_error(world):
    with pytest.raises(ValueError, match="short"):
        world.eval_split("medium")


def test_docstring_examples():
    assert doctest.testmod(world_module).failed == 0
