"""Recipe -> MMEngine config: the only place that knows both formats.

Everything the config alone can tell is checked here, before any Runner exists: the
model is a registered text encoder, the data files exist, the batch splits over the
processes, the tokenizer loads, and the text encoder -- described from its config, no
weights read -- takes every view's token budget and the tokenizer's vocabulary. Each
error names where the value was written (the recipe file, a ``_base_``, ``--set``,
``--train``...). The parts every recipe's config shares are in
:mod:`~vlr_plugins.integrations.mmengine.config_parts`; MVC recipes (``data.schema: mvc``)
are built by :mod:`~vlr_plugins.integrations.mmengine.mvc_config`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from vlr_plugins.integrations.mmengine.config_parts import (
    batch_layout,
    check_model_type,
    check_train_file,
    count_samples,
    launcher_world_size,
    runtime_config,
    schedulers,
    text_encoder_config,
    text_encoder_shape,
    tokenizer_setting,
    train_loader,
    views_config,
)
from vlr_plugins.integrations.mmengine.mvc_config import mvc_recipe_to_mmengine_config
from vlr_plugins.recipe import Recipe

__all__ = ["recipe_to_mmengine_config", "count_samples", "text_encoder_shape", "tokenizer_setting"]


def recipe_to_mmengine_config(
    recipe: Recipe,
    work_dir: str,
    *,
    tokenizer: str | None = None,
    world_size: int | None = None,
    launcher: str = "none",
    log_level: str = "INFO",
) -> dict[str, Any]:
    """Build the dict for ``mmengine.Config`` / ``Runner.from_cfg`` from a recipe.

    ``recipe.train.batch_size`` is the global contrastive batch (the losses gather
    across ranks), split evenly over ``world_size`` processes (default ``$WORLD_SIZE``).
    The warm-up + cosine schedule is laid out in iterations, so the number of samples
    is read here. A video-text recipe (``data.schema: mvc``) is built by
    :func:`~vlr_plugins.integrations.mmengine.mvc_config.mvc_recipe_to_mmengine_config`.
    """
    if world_size is None:  # the launcher's count of processes (srun's, mpirun's, torchrun's)
        world_size = launcher_world_size(launcher)
    if recipe.data.schema == "mvc":
        return mvc_recipe_to_mmengine_config(recipe, work_dir, tokenizer=tokenizer, world_size=world_size,
                                             launcher=launcher, log_level=log_level)
    t, d = recipe.train, recipe.data
    check_model_type(recipe)
    check_train_file(recipe)
    if not d.image_embeddings:
        raise recipe.error("data.image_embeddings", "missing: set it in the recipe or on the command line "
                                                    "(--image-embeddings)")
    if not os.path.exists(d.image_embeddings):
        raise recipe.error("data.image_embeddings", f"no such folder: {d.image_embeddings}")
    if not os.path.isdir(d.image_embeddings):
        raise recipe.error("data.image_embeddings", f"{d.image_embeddings} is a file; expected an embedding "
                                                    "store folder (vlr precompute)")
    per_rank, iters_per_epoch = batch_layout(recipe, world_size)
    model_cfg, tok, tokenizer_obj = text_encoder_config(recipe, tokenizer)
    collate = dict(type="vlr_plugins.vlr_text_views_collate", pad_token_id=tokenizer_obj.pad_token_id or 0)

    cfg = runtime_config(
        recipe, work_dir, launcher=launcher, log_level=log_level,
        model=dict(type="TextOnlyRetrievalModel", text_encoder=model_cfg, loss=dict(recipe.loss),
                   length_blocks=t.length_blocks),
        train_dataloader=train_loader(
            recipe,
            dict(type="ParagraphTextViewsDataset", ann_file=d.train, image_embeddings=d.image_embeddings,
                 positives=views_config(recipe.text_views.positives),
                 negatives=views_config(recipe.text_views.negatives),
                 tokenizer=tok, fraction=d.fraction, seed=d.seed),
            collate, shuffle=True, batch_size=per_rank, drop_last=t.drop_last,
        ),
        param_scheduler=schedulers(recipe, t.epochs * iters_per_epoch, iters_per_epoch),
    )
    if recipe.eval:
        val = train_loader(
            recipe,
            dict(type="RetrievalEvalDataset", splits=[dataclasses.asdict(s) for s in recipe.eval],
                 tokenizer=tok, image_embeddings=d.image_embeddings),
            collate, shuffle=False, batch_size=per_rank, drop_last=False,
        )
        cfg.update(val_dataloader=val, val_cfg=dict(), val_evaluator=dict(type="RetrievalRecallMetric"),
                   test_dataloader=val, test_cfg=dict(), test_evaluator=dict(type="RetrievalRecallMetric"))
    return cfg

