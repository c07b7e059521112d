"""truncation_sweep with a tiny random BLIP text encoder, offline; plot_truncation draws Figure 2."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from vlr_plugins.data import RetrievalSet  # noqa: E402
from vlr_plugins.eval import (  # noqa: E402
    TRUNCATION_BUDGETS,
    plot_truncation,
    retrieval_recall,
    truncation_sweep,
)
from vlr_plugins.text import BlipTextEncoder, build_wordpiece_tokenizer, words_of  # noqa: E402

# several texts share their first words, so that a short budget makes them identical
PREFIX = "a photo of a kitchen with white cabinets and a wooden table"
ITEMS = [
    ("k1", [f"{PREFIX} and a red kettle on the stove next to a window with green curtains",
            "a small kitchen"]),
    ("k2", [f"{PREFIX} and two black chairs under a lamp that hangs from the ceiling"]),
    ("k3", [f"{PREFIX} and a cat asleep on the floor"]),
    ("b1", [("a man rides a bicycle along the beach at sunset while gulls fly over the water "
             "and children build a sand castle near the waves")]),
    ("d1", ["a brown dog runs"]),
    ("s1", ["a bowl of soup on a blue plate with a spoon and some bread"]),
]


@pytest.fixture(scope="module")
def retrieval_set():
    texts = [t for _, ts in ITEMS for t in ts]
    owner = torch.tensor([i for i, (_, ts) in enumerate(ITEMS) for _ in ts])
    return RetrievalSet("tiny", tuple(i for i, _ in ITEMS), tuple(texts), owner)


@pytest.fixture(scope="module")
def tok(retrieval_set):
    return build_wordpiece_tokenizer(words_of(retrieval_set.texts), model_max_length=160)


@pytest.fixture(scope="module")
def encoder(tok):
    torch.manual_seed(0)
    # BERT's 0.02 init makes a 1-layer random encoder map every text to nearly the same
    # [CLS] embedding (cosine > 0.9999); a wide init gives texts distinct embeddings
    enc = BlipTextEncoder(
        config=dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=160, pad_token_id=tok.pad_token_id,
                    bos_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id,
                    initializer_range=0.5),
        embed_dim=16,
    )
    return enc.eval()


def encode_alone(encoder, tok, texts, budget):
    """Reference: each text cut by the tokenizer at ``budget`` and encoded on its own."""
    rows = []
    with torch.no_grad():
        for text in texts:
            ids = torch.tensor([tok(text, truncation=True, max_length=budget)["input_ids"]])
            rows.append(encoder(ids, torch.ones_like(ids))[0])
    return torch.stack(rows)


@pytest.fixture(scope="module")
def items(encoder, tok, retrieval_set):
    """Item embeddings near the mean of their full texts: retrieval is good at full length."""
    full = encode_alone(encoder, tok, retrieval_set.texts, 160)
    g = torch.Generator().manual_seed(1)
    means = torch.stack([full[retrieval_set.text_owner == i].mean(0) for i in range(len(ITEMS))])
    return means + 0.02 * torch.randn(means.shape, generator=g)


def longest(tok, texts):
    return max(len(tok(t)["input_ids"]) for t in texts)


def test_each_budget_equals_encoding_the_truncated_texts_directly(encoder, tok, retrieval_set, items):
    budgets = (4, 8, 14, 22, 40)
    assert longest(tok, retrieval_set.texts) > 22  # the budgets really cut

    # batch_size 3: texts of different lengths share padded batches
    got = truncation_sweep(encoder, tok, items, retrieval_set, budgets, batch_size=3, progress=False)

    assert list(got) == list(budgets)
    for budget in budgets:
        text_emb = encode_alone(encoder, tok, retrieval_set.texts, budget)
        expected = retrieval_recall(items, text_emb, retrieval_set.text_owner)
        assert got[budget] == pytest.approx(expected), budget
    # at 8 tokens the three kitchen texts are identical, at full length they are not
    assert got[8]["t2i_r1"] < got[40]["t2i_r1"]


def test_budgets_past_the_longest_text_agree(encoder, tok, retrieval_set, items):
    n_tokens = longest(tok, retrieval_set.texts)
    assert TRUNCATION_BUDGETS[0] < n_tokens < TRUNCATION_BUDGETS[1]

    got = truncation_sweep(encoder, tok, items, retrieval_set, progress=False)

    assert list(got) == [20, 40, 60, 80, 100, 128]
    for budget in (60, 80, 100, 128):
        assert got[budget] == got[40]
    assert got[20] != got[40]


def test_ks_are_passed_to_retrieval_recall(encoder, tok, retrieval_set, items):
    got = truncation_sweep(encoder, tok, items, retrieval_set, (40,), ks=(1, 2), progress=False)
    assert sorted(got[40]) == ["i2t_mean", "i2t_r1", "i2t_r2", "r_mean", "t2i_mean", "t2i_r1", "t2i_r2"]


@pytest.mark.parametrize("budgets, message", [
    ((20, 40, 20), r"budgets repeat \[20\]"),
    ((2, 40), "must leave room for a word"),
    ((40, 200), "budget 200 exceeds the encoder's 160 positions"),
    ((), "no budgets"),
])
def test_bad_budgets_are_refused_before_encoding(encoder, tok, retrieval_set, items, budgets, message):
    with pytest.raises(ValueError, match=message):
        truncation_sweep(encoder, tok, items, retrieval_set, budgets, progress=False)


def test_item_embeddings_must_match_the_set(encoder, tok, retrieval_set, items):
    with pytest.raises(ValueError, match=r"expected item_emb \(6, D\).*'tiny', found \(5, 16\)"):
        truncation_sweep(encoder, tok, items[:5], retrieval_set, (40,), progress=False)


def test_plot_is_a_png(encoder, tok, retrieval_set, items, tmp_path):
    pytest.importorskip("matplotlib")
    curves = {
        "random": truncation_sweep(encoder, tok, items, retrieval_set, (4, 8, 14, 40), progress=False),
        "shuffled items": truncation_sweep(encoder, tok, items.flip(0), retrieval_set, (4, 8, 14, 40),
                                           progress=False),
    }
    path = tmp_path / "truncation.png"

    plot_truncation(curves, path, title="tiny")

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000
    assert [p.name for p in tmp_path.iterdir()] == ["truncation.png"]  # no temp file left

    # curves read back from results.json have string budgets
    plot_truncation(json.loads(json.dumps(curves)), tmp_path / "from-json.png")
    assert (tmp_path / "from-json.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rank_metrics_are_swept_and_plotted_as_ranks(encoder, tok, retrieval_set, items, tmp_path):
    got = truncation_sweep(encoder, tok, items, retrieval_set, (8, 40), ks=(1,), rank_metrics=("mdr", "mrr@3"),
                           progress=False)
    for budget in (8, 40):
        text_emb = encode_alone(encoder, tok, retrieval_set.texts, budget)
        expected = retrieval_recall(items, text_emb, retrieval_set.text_owner, ks=(1,), rank_metrics=("mdr", "mrr@3"))
        assert got[budget] == pytest.approx(expected) and "t2i_mdr" in got[budget]
    pytest.importorskip("matplotlib")
    plot_truncation({"random": got}, tmp_path / "mdr.png", metrics=("i2t_mdr", "t2i_mdr"))
    assert (tmp_path / "mdr.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(KeyError, match=r"budget 8 lacks \['t2i_mnr'\]"):
        plot_truncation({"random": got}, tmp_path / "mnr.png", metrics=("t2i_mnr",))
    assert not (tmp_path / "mnr.png").exists()
