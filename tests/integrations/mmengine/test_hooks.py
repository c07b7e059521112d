"""WeightsOnlyCheckpointHook records what a model card needs: the loss as trained, not as written."""

from __future__ import annotations

import inspect
import logging

import pytest
import torch

pytest.importorskip("mmengine")
from mmengine.config import Config  # noqa: E402
from mmengine.runner import Runner  # noqa: E402

from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config  # noqa: E402
from vlr_plugins.losses import MultiPositiveInfoNCELoss  # noqa: E402
from vlr_plugins.recipe import load_recipe  # noqa: E402
from vlr_plugins.registry import LOSSES  # noqa: E402


def test_the_checkpoint_records_the_trained_loss_with_its_defaults(tiny_world, tiny_encoder_cfg, tmp_path):
    recipe = load_recipe("paragraph/c5", {
        "model": tiny_encoder_cfg,
        "loss": {"temperature": 0.07, "learnable_temperature": True},
        "data": {"train": tiny_world["train"], "image_embeddings": tiny_world["image_embeddings"]},
        "train": {"batch_size": 16, "epochs": 1, "warmup_steps": 1, "num_workers": 0, "lr": 1e-2},
    })
    assert "variant" not in recipe.loss  # the recipe leaves it to the loss's default
    Runner.from_cfg(Config(recipe_to_mmengine_config(recipe, str(tmp_path), log_level="WARNING"))).train()
    logging.getLogger("mmengine").handlers.clear()

    ckpt = torch.load(tmp_path / "epoch_1.pth", map_location="cpu", weights_only=True)
    recorded = ckpt["meta"]["vlr_loss"]
    learned = ckpt["state_dict"]["loss_fn.temperature"].item()
    assert learned != pytest.approx(0.07)  # it trained
    assert recorded["type"] == "MultiPositiveInfoNCELoss"
    assert recorded["temperature"] == pytest.approx(learned)
    assert recorded["learnable_temperature"] is True
    assert recorded["variant"] == inspect.signature(MultiPositiveInfoNCELoss).parameters["variant"].default
    # the record is a config the registry builds back into the trained loss
    rebuilt = LOSSES.build(recorded)
    assert type(rebuilt) is MultiPositiveInfoNCELoss and rebuilt.temperature.item() == pytest.approx(learned)
