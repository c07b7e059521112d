"""The MMEngine config of a tiny one-epoch run of a shipped paragraph recipe (tests only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def one_epoch_config(recipe_name: str, tiny_world: dict, tiny_encoder_cfg: dict,
                     work_dir: str | Path) -> dict[str, Any]:
    """``recipe_name`` (e.g. ``paragraph/c1``) with the tiny encoder and world: one epoch of
    batches of 16, no DataLoader workers, a log line every step, into ``work_dir``."""
    from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config
    from vlr_plugins.recipe import load_recipe

    recipe = load_recipe(recipe_name, {
        "model": tiny_encoder_cfg,
        "data": {"train": tiny_world["train"], "image_embeddings": tiny_world["image_embeddings"]},
        "train": {"batch_size": 16, "epochs": 1, "num_workers": 0, "log_interval": 1}})
    return recipe_to_mmengine_config(recipe, str(work_dir))
