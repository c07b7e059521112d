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


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, tiny_world, tiny_encoder_cfg):
    """A `vlr train` checkpoint (C5 on the tiny world, one epoch), written once per session."""
    import logging

    pytest.importorskip("mmengine")
    from mmengine.config import Config
    from mmengine.runner import Runner

    from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config
    from vlr_plugins.recipe import load_recipe

    work = tmp_path_factory.mktemp("run")
    recipe = load_recipe("paragraph/c5", {
        "model": tiny_encoder_cfg,
        "data": {"train": tiny_world["train"], "image_embeddings": tiny_world["image_embeddings"]},
        "train": {"batch_size": 16, "epochs": 1, "warmup_steps": 1, "num_workers": 0, "lr": 1e-3},
    })
    Runner.from_cfg(Config(recipe_to_mmengine_config(recipe, str(work), log_level="WARNING"))).train()
    logging.getLogger("mmengine").handlers.clear()
    return work / "epoch_1.pth"
