"""Shared fixtures: a tiny synthetic world and a tiny BLIP-shaped text encoder config."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory):
    """Paths of a small synthetic world written once per session (train, eval, store, tokenizer)."""
    from vlr_plugins.data.synthetic_world import SyntheticWorld, SyntheticWorldConfig

    world = SyntheticWorld(SyntheticWorldConfig(seed=1, num_train=48, num_eval=16, dim=32))
    paths = world.write(tmp_path_factory.mktemp("world"))
    return {**{k: str(v) for k, v in paths.items()}, "object": world}


@pytest.fixture(scope="session")
def tiny_encoder_cfg(tiny_world):
    """A recipe ``model`` mapping for a random-init 1-layer BLIP text encoder."""
    tok = tiny_world["object"].tokenizer()
    return {
        "type": "BlipTextEncoder",
        "pretrained": None,
        "config": dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=64, max_position_embeddings=160, pad_token_id=tok.pad_token_id,
                       bos_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id),
        "embed_dim": 32,
        "tokenizer": tiny_world["tokenizer"],
    }
