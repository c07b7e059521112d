"""encode_texts and evaluate_splits with a tiny random BLIP text encoder, offline."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from vlr_plugins.data import EmbeddingStoreWriter  # noqa: E402
from vlr_plugins.eval import encode_texts, evaluate_splits, retrieval_recall  # noqa: E402
from vlr_plugins.recipe import EvalSplit  # noqa: E402
from vlr_plugins.text import BlipTextEncoder, build_wordpiece_tokenizer, words_of  # noqa: E402

TEXTS = [
    "a dog",
    "a red car parked on a wide street next to a tall old building with blue windows",
    "two cats sleep",
    "a man rides a bicycle along the beach at sunset while gulls fly over the water",
    "green tree",
    "children play football in a park",
    "a bowl of soup",
]


@pytest.fixture(scope="module")
def tok():
    return build_wordpiece_tokenizer(words_of(TEXTS), model_max_length=64)


@pytest.fixture(scope="module")
def encoder(tok):
    torch.manual_seed(0)
    # dropout on, so that a forward pass in training mode would not be deterministic
    return BlipTextEncoder(
        config=dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1,
                    num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                    hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.2,
                    pad_token_id=tok.pad_token_id, bos_token_id=tok.cls_token_id,
                    sep_token_id=tok.sep_token_id),
        embed_dim=16,
    )


def encode_one(encoder, input_ids: list[int]) -> torch.Tensor:
    """The embedding of one text on its own: no padding, eval mode."""
    was_training = encoder.training
    encoder.eval()
    with torch.no_grad():
        ids = torch.tensor([input_ids])
        out = encoder(ids, torch.ones_like(ids))[0]
    encoder.train(was_training)
    return out


def test_rows_follow_the_input_order_and_equal_encoding_each_text_alone(encoder, tok):
    # batch_size 2: texts of different lengths share padded batches, and encode_texts
    # reorders them by length internally
    got = encode_texts(encoder, tok, TEXTS, max_tokens=64, batch_size=2, progress=False)

    assert got.shape == (len(TEXTS), encoder.embed_dim) and got.dtype == torch.float32
    for row, text in zip(got, TEXTS):
        torch.testing.assert_close(row, encode_one(encoder, tok(text)["input_ids"]),
                                   rtol=1e-5, atol=1e-5)
    assert not torch.allclose(got[0], got[1], atol=1e-3)  # rows really differ


def test_max_tokens_cuts_texts_like_training(encoder, tok):
    text = TEXTS[3]
    word_ids = tok(text, add_special_tokens=False)["input_ids"]
    max_tokens = 6
    assert len(word_ids) > max_tokens
    truncated = [tok.cls_token_id, *word_ids[: max_tokens - 2], tok.sep_token_id]

    got = encode_texts(encoder, tok, [text, TEXTS[0]], max_tokens=max_tokens, progress=False)

    torch.testing.assert_close(got[0], encode_one(encoder, truncated), rtol=1e-5, atol=1e-5)
    full = encode_one(encoder, tok(text)["input_ids"])
    assert not torch.allclose(got[0], full, atol=1e-4)


@pytest.mark.parametrize("training", [True, False])
def test_restores_the_train_eval_mode(encoder, tok, training):
    encoder.train(training)
    encode_texts(encoder, tok, TEXTS[:3], max_tokens=64, progress=False)
    assert all(m.training == training for m in encoder.modules())
    encoder.eval()


def test_restores_the_mode_after_an_error(encoder, tok):
    encoder.train()
    with pytest.raises(ValueError, match="exceed"):
        # the tokenizer allows 80 tokens, the encoder has 64 positions
        encode_texts(encoder, tok, [" ".join(["dog"] * 100)], max_tokens=80, progress=False)
    assert encoder.training
    encoder.eval()


def test_no_texts_is_an_error(encoder, tok):
    with pytest.raises(ValueError, match="no texts to encode"):
        encode_texts(encoder, tok, [], max_tokens=64, progress=False)


# ---------------------------------------------------------------- evaluate_splits

SPLIT = [  # (item id, its texts): 1 to 3 texts per item
    ("img-b", [TEXTS[0], TEXTS[2]]),
    ("img-a", [TEXTS[1]]),
    ("img-d", [TEXTS[3], TEXTS[4], TEXTS[5]]),
    ("img-c", [TEXTS[6]]),
]


@pytest.fixture(scope="module")
def split_files(tmp_path_factory, encoder, tok):
    root = tmp_path_factory.mktemp("eval")
    ann = root / "val.jsonl"
    ann.write_text("".join(json.dumps({"id": i, "texts": t}) + "\n" for i, t in SPLIT))
    # item embeddings: the mean of its texts' embeddings plus noise, so that recall is
    # informative; stored in another order than the split, with an extra id
    g = torch.Generator().manual_seed(1)
    rows = {}
    for item_id, texts in SPLIT:
        emb = torch.stack([encode_one(encoder, tok(t)["input_ids"]) for t in texts]).mean(0)
        rows[item_id] = emb + 0.05 * torch.randn(emb.shape, generator=g)
    rows["img-unused"] = torch.randn(encoder.embed_dim, generator=g)
    store = root / "store"
    with EmbeddingStoreWriter(store, encoder.embed_dim, shard_size=2) as writer:
        ids = sorted(rows, reverse=True)
        writer.add(ids, torch.stack([rows[i] for i in ids]))
    return ann, store, rows


def expected_recall(encoder, tok, rows, max_tokens, ks):
    items = torch.stack([rows[item_id] for item_id, _ in SPLIT])
    texts = [t for _, ts in SPLIT for t in ts]
    owner = torch.tensor([i for i, (_, ts) in enumerate(SPLIT) for _ in ts])
    text_emb = encode_texts(encoder, tok, texts, max_tokens, progress=False)
    return retrieval_recall(items, text_emb, owner, ks=ks)


def test_evaluate_splits_equals_retrieval_recall_computed_directly(encoder, tok, split_files):
    ann, store, rows = split_files
    splits = [
        EvalSplit(name="val", ann_file=str(ann), max_tokens=64, image_embeddings=str(store)),
        EvalSplit(name="val-short", ann_file=str(ann), max_tokens=5),
    ]

    got = evaluate_splits(encoder, tok, splits, image_embeddings=str(store), ks=(1, 2),
                          batch_size=3, progress=False)

    assert list(got) == ["val", "val-short"]
    assert got["val"] == expected_recall(encoder, tok, rows, 64, (1, 2))
    assert got["val-short"] == expected_recall(encoder, tok, rows, 5, (1, 2))
    assert got["val"]["t2i_r2"] > 50  # items are aligned with their texts, not shuffled


def test_a_split_without_a_store_is_an_error(encoder, tok, split_files):
    ann, _, _ = split_files
    with pytest.raises(ValueError, match="split 'val' names no image_embeddings store"):
        evaluate_splits(encoder, tok, [EvalSplit("val", str(ann), 64)], progress=False)
