"""A tiny random BlipTextEncoder with a real WordPiece tokenizer, shared by the hf tests."""

from __future__ import annotations

import pytest

#: 49 words + 5 special tokens + 6 punctuation marks = a 60-token vocabulary
WORDS = ("a an the red green blue white black small large old young dog cat bird horse car bus boat train "
         "man woman child people street beach field road water grass tree house sky park "
         "sits runs stands holds rides walks near on in under with of two three and").split()

TEXTS = [
    "A red car near the beach.",
    "Two young people walk on the street with a black dog, and a small white bird sits in a tree.",
    "an old man rides a horse",
]


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from vlr_plugins.text import build_wordpiece_tokenizer

    tok = build_wordpiece_tokenizer(WORDS)
    assert len(tok) == 60
    return tok


@pytest.fixture(scope="session")
def tiny_tokenizer_dir(tiny_tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tokenizer")
    tiny_tokenizer.save_pretrained(folder)
    return folder


def tiny_text_config(tok) -> dict:
    # initializer_range 0.5: random weights that give clearly different embeddings per text
    return dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=160, initializer_range=0.5,
                pad_token_id=tok.pad_token_id, bos_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id)


@pytest.fixture(scope="session")
def tiny_encoder(tiny_tokenizer, tiny_tokenizer_dir):
    import torch

    from vlr_plugins.text import BlipTextEncoder

    torch.manual_seed(0)
    enc = BlipTextEncoder(config=tiny_text_config(tiny_tokenizer), embed_dim=16, tokenizer=str(tiny_tokenizer_dir))
    return enc.eval()


@pytest.fixture(scope="session")
def tiny_batch(tiny_tokenizer):
    """TEXTS tokenized as a user would: padded, truncated at a budget, with token_type_ids."""
    return dict(tiny_tokenizer(TEXTS, truncation=True, max_length=24, padding=True, return_tensors="pt"))
