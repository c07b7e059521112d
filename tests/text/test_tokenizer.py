"""build_wordpiece_tokenizer: a closed-vocabulary BERT tokenizer that round-trips offline."""

from __future__ import annotations

import doctest
import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from vlr_plugins.text import tokenizer as tokenizer_module  # noqa: E402
from vlr_plugins.text.tokenizer import (  # noqa: E402
    PUNCTUATION,
    SPECIAL_TOKENS,
    build_wordpiece_tokenizer,
    pad_token_rows,
    token_ids_at_budgets,
    words_of,
)

CORPUS = [
    "A red car parked on the street.",
    "Two dogs run on a sunny beach; one dog sits.",
    "The bicycle's frame is blue-green: a 2019 model",
]


@pytest.fixture(scope="module")
def words() -> set[str]:
    return words_of(CORPUS)


@pytest.fixture(scope="module")
def tok(words):
    return build_wordpiece_tokenizer(words, model_max_length=64)


def test_words_of_lowercases_and_splits_on_non_alphanumerics():
    words = words_of(["Blue-green, 2019's BIKE_rack"])
    assert words == {"blue", "green", "2019", "s", "bike", "rack"}
    assert words_of([]) == set()


def test_special_tokens_have_bert_ids_and_are_set(tok):
    vocab = tok.get_vocab()
    assert [vocab[t] for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    assert tok.pad_token_id == 0
    assert (tok.unk_token, tok.cls_token, tok.sep_token, tok.mask_token) == SPECIAL_TOKENS[1:]
    assert set(PUNCTUATION) <= set(vocab)


def test_every_vocabulary_word_is_one_known_token(tok, words):
    vocab = tok.get_vocab()
    assert len(vocab) == len(SPECIAL_TOKENS) + len(words) + len(PUNCTUATION)
    for word in sorted(words):
        ids = tok(word, add_special_tokens=False)["input_ids"]
        assert ids == [vocab[word]], word
        assert ids != [tok.unk_token_id]


def test_upper_case_input_is_lowercased(tok):
    assert tok("RED CAR")["input_ids"] == tok("red car")["input_ids"]


def test_unknown_word_is_one_unk(tok):
    ids = tok("a zebra", add_special_tokens=False)["input_ids"]
    assert ids == [tok.get_vocab()["a"], tok.unk_token_id]
    # a word sharing a prefix with a known word is still a single [UNK], not word pieces
    assert tok("cars", add_special_tokens=False)["input_ids"] == [tok.unk_token_id]


def test_cls_first_sep_last_and_punctuation_split_off(tok):
    tokens = tok.convert_ids_to_tokens(tok("A red car.")["input_ids"])
    assert tokens == ["[CLS]", "a", "red", "car", ".", "[SEP]"]


def test_batch_padding_truncation_and_tensors(tok):
    texts = ["a red car", " ".join(["dog"] * 100), "street"]
    enc = tok(texts, truncation=True, max_length=8, padding=True, return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    assert ids.shape == (3, 8)
    assert (ids[:, 0] == tok.cls_token_id).all()
    lengths = mask.sum(1).tolist()
    assert lengths == [5, 8, 3]
    for row, n in zip(ids.tolist(), lengths):
        assert row[n - 1] == tok.sep_token_id
        assert row[n:] == [tok.pad_token_id] * (8 - n)


def test_each_text_is_cut_at_its_own_budget_and_padded_like_the_tokenizer(tok):
    texts = [CORPUS[1], CORPUS[0], CORPUS[1], "street"]
    budgets = [6, 64, 64, 6]
    rows = token_ids_at_budgets(tok, texts, budgets)
    assert rows == [tok(t, truncation=True, max_length=b)["input_ids"] for t, b in zip(texts, budgets)]
    ids, mask = pad_token_rows(rows, tok.pad_token_id)
    ref = tok.pad({"input_ids": rows}, return_tensors="pt")
    assert ids.tolist() == ref["input_ids"].tolist() and mask.tolist() == ref["attention_mask"].tolist()
    with pytest.raises(ValueError, match="2 texts but 1 token budgets"):
        token_ids_at_budgets(tok, texts[:2], [6])


def test_model_max_length_is_the_default_truncation(tok):
    ids = tok(" ".join(["dog"] * 100), truncation=True)["input_ids"]
    assert len(ids) == tok.model_max_length == 64
    assert ids[-1] == tok.sep_token_id


def test_save_pretrained_round_trips_offline(tok, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    texts = [*CORPUS, "An unseen ZEBRA, truly."]
    assert again(texts)["input_ids"] == tok(texts)["input_ids"]
    assert again.get_vocab() == tok.get_vocab()
    assert again.model_max_length == tok.model_max_length
    assert (again.pad_token_id, again.cls_token_id, again.sep_token_id, again.unk_token_id,
            again.mask_token_id) == (0, 2, 3, 1, 4)


def test_lowercase_false_survives_the_round_trip(tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cased = build_wordpiece_tokenizer(["Red", "car"], lowercase=False)
    cased.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path)
    for t in (cased, again):
        assert t.convert_ids_to_tokens(t("Red red car")["input_ids"]) == [
            "[CLS]", "Red", "[UNK]", "car", "[SEP]"
        ]


def test_rejects_words_with_whitespace_and_tiny_max_length():
    with pytest.raises(ValueError, match="whitespace"):
        build_wordpiece_tokenizer(["red car"])
    with pytest.raises(ValueError, match="model_max_length"):
        build_wordpiece_tokenizer(["red"], model_max_length=1)


def test_importing_the_text_package_does_not_import_transformers():
    code = (
        "import sys, vlr_plugins.text as t; assert 'transformers' not in sys.modules; "
        "t.words_of(['a']); assert 'transformers' not in sys.modules; "
        "t.build_wordpiece_tokenizer; print('ok')"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_docstring_examples():
    assert doctest.testmod(tokenizer_module).failed == 0
