"""``loss.cache_chunk`` in an MMEngine run: the recipe switch reaches the model, its training
pass encodes through the gradient cache, and MMEngine's own step (``update_params``, also
with gradient accumulation) trains the same weights as without the cache."""

from __future__ import annotations

import logging

import pytest
import torch

pytest.importorskip("mmengine")
from mmengine.config import Config  # noqa: E402
from mmengine.runner import Runner  # noqa: E402

from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config  # noqa: E402
from vlr_plugins.recipe import load_recipe  # noqa: E402


def _runner(tiny_world, tiny_encoder_cfg, work_dir, cache_chunk=None, accumulate=1):
    """paragraph/c5 (several texts per image) on the tiny world: 3 steps of batch 16. The
    tiny encoder has no dropout, so one pass over the batch is the reference; the core tests
    (tests/losses/test_gradcache.py) check the replayed dropout."""
    loss = {"cache_chunk": cache_chunk} if cache_chunk else {}
    recipe = load_recipe("paragraph/c5", {
        "model": tiny_encoder_cfg,
        "loss": loss,
        "data": {"train": tiny_world["train"], "image_embeddings": tiny_world["image_embeddings"]},
        "train": {"batch_size": 16, "epochs": 1, "lr": 1e-3, "warmup_steps": 1, "num_workers": 0},
    })
    cfg = Config(recipe_to_mmengine_config(recipe, str(work_dir), log_level="WARNING"))
    cfg.optim_wrapper["accumulative_counts"] = accumulate
    return Runner.from_cfg(cfg)


def test_the_recipe_switch_makes_the_training_pass_cached(tiny_world, tiny_encoder_cfg, tmp_path):
    runner = _runner(tiny_world, tiny_encoder_cfg, tmp_path, cache_chunk=5)
    model = runner.model
    assert model.loss_fn.cache_chunk == 5
    batch = model.data_preprocessor(next(iter(runner.train_dataloader)), True)
    loss = model(**batch, mode="loss")["loss"]
    nodes, stack = set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None and node not in nodes:
            nodes.add(node)
            stack.extend(n for n, _ in node.next_functions)
    assert "_CachedEncodeBackward" in {type(n).__name__ for n in nodes}
    with torch.no_grad():  # evaluation and prediction encode in one pass
        plain = model(**batch, mode="tensor")
    assert plain.grad_fn is None


@pytest.mark.parametrize("accumulate", [1, 2])
def test_cached_training_trains_the_uncached_weights(tiny_world, tiny_encoder_cfg, tmp_path, accumulate):
    weights = {}
    for chunk in (None, 5):
        runner = _runner(tiny_world, tiny_encoder_cfg, tmp_path / str(chunk), chunk, accumulate)
        runner.train()
        weights[chunk] = runner.model.state_dict()
        logging.getLogger("mmengine").handlers.clear()
    changed = 0
    for name, expected in weights[None].items():
        torch.testing.assert_close(weights[5][name], expected, rtol=1e-5, atol=1e-5, msg=name)
        changed += name.startswith("text_encoder.")
    assert changed > 10
