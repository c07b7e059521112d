"""Recipe -> MMEngine config: the only place that knows both formats."""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import torch

from vlr_plugins.recipe import Recipe, RecipeError

__all__ = ["recipe_to_mmengine_config", "count_samples"]


def count_samples(path: str) -> int:
    """Number of training records without parsing them (JSON Lines or Parquet)."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def _views(views) -> list[dict]:
    return [dataclasses.asdict(v) for v in views]


def _tokenizer_of(recipe: Recipe, override: str | None) -> str:
    tok = override or recipe.model.get("tokenizer") or recipe.model.get("pretrained")
    if not tok:
        raise RecipeError(recipe.source, "model.tokenizer",
                          "missing: the model is built from a config, so name its tokenizer folder")
    return tok


def _schedulers(recipe: Recipe, total_iters: int) -> list[dict]:
    t = recipe.train
    warmup = min(t.warmup_steps, total_iters)
    out: list[dict] = []
    if warmup > 0:
        out.append(dict(type="LinearLR", start_factor=t.warmup_start_factor, by_epoch=False,
                        begin=0, end=warmup))
    if t.schedule == "cosine" and warmup < total_iters:
        out.append(dict(type="CosineAnnealingLR", T_max=total_iters - warmup, eta_min=t.min_lr,
                        by_epoch=False, begin=warmup, end=total_iters))
    return out


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
    is read here.
    """
    t, d = recipe.train, recipe.data
    from vlr_plugins.registry import MODELS

    if recipe.model["type"] not in MODELS:
        hint = " (open_clip recipes run with `vlr openclip-train`)" if recipe.model["type"] == "open_clip" else ""
        raise RecipeError(recipe.source, "model.type",
                          f"{recipe.model['type']!r} is not a registered text encoder{hint}; "
                          f"registered: {', '.join(MODELS.names())}")
    for key in ("train", "image_embeddings"):
        if not getattr(d, key):
            raise RecipeError(recipe.source, f"data.{key}", "missing: set it in the recipe or on the command line")
        if not os.path.exists(getattr(d, key)):
            raise RecipeError(recipe.source, f"data.{key}", f"no such file or folder: {getattr(d, key)}")
    world = world_size or int(os.environ.get("WORLD_SIZE", "1"))
    if t.batch_size % world:
        raise RecipeError(recipe.source, "train.batch_size",
                          f"{t.batch_size} does not split evenly over {world} processes")
    per_rank = t.batch_size // world
    n = max(1, round(d.fraction * count_samples(d.train))) if d.fraction < 1 else count_samples(d.train)
    n_rank = math.ceil(n / world)
    iters_per_epoch = n_rank // per_rank if t.drop_last else math.ceil(n_rank / per_rank)
    if iters_per_epoch < 1:
        raise RecipeError(recipe.source, "train.batch_size",
                          f"{n} samples give no full batch of {t.batch_size} (set drop_last: false or a smaller batch)")
    tok = _tokenizer_of(recipe, tokenizer)
    from transformers import AutoTokenizer

    pad_id = AutoTokenizer.from_pretrained(tok).pad_token_id or 0
    model_cfg = {k: v for k, v in recipe.model.items()}
    if "tokenizer" not in model_cfg and model_cfg.get("pretrained") != tok:
        model_cfg["tokenizer"] = tok

    def loader(dataset: dict, shuffle: bool, batch_size: int, drop_last: bool) -> dict:
        return dict(
            batch_size=batch_size,
            num_workers=t.num_workers,
            persistent_workers=t.num_workers > 0,
            drop_last=drop_last,
            sampler=dict(type="DefaultSampler", shuffle=shuffle),
            collate_fn=dict(type="vlr_plugins.vlr_text_views_collate", pad_token_id=pad_id),
            dataset=dataset,
        )

    cfg: dict[str, Any] = dict(
        default_scope="vlr_plugins",
        custom_imports=dict(imports=["vlr_plugins.integrations.mmengine"], allow_failed_imports=False),
        work_dir=work_dir,
        experiment_name=recipe.name,
        launcher=launcher,
        randomness=dict(seed=t.seed),
        vlr_recipe=recipe.to_dict(),
        model=dict(type="TextOnlyRetrievalModel", text_encoder=model_cfg, loss=dict(recipe.loss)),
        train_dataloader=loader(
            dict(type="ParagraphTextViewsDataset", ann_file=d.train, image_embeddings=d.image_embeddings,
                 positives=_views(recipe.text_views.positives), negatives=_views(recipe.text_views.negatives),
                 tokenizer=tok, fraction=d.fraction, seed=d.seed),
            shuffle=True, batch_size=per_rank, drop_last=t.drop_last,
        ),
        train_cfg=dict(by_epoch=True, max_epochs=t.epochs, val_interval=1),
        optim_wrapper=dict(
            type="AmpOptimWrapper" if t.amp else "OptimWrapper",
            optimizer=dict(type="AdamW", lr=t.lr, weight_decay=t.weight_decay, betas=t.betas),
            clip_grad=dict(max_norm=t.grad_clip) if t.grad_clip else None,
        ),
        param_scheduler=_schedulers(recipe, t.epochs * iters_per_epoch),
        default_hooks=dict(
            timer=dict(type="IterTimerHook"),
            logger=dict(type="LoggerHook", interval=t.log_interval),
            param_scheduler=dict(type="ParamSchedulerHook"),
            checkpoint=dict(type="CheckpointHook", interval=t.checkpoint_interval, by_epoch=True,
                            max_keep_ckpts=t.max_keep_checkpoints, save_last=True),
            sampler_seed=dict(type="DistSamplerSeedHook"),
        ),
        custom_hooks=[dict(type="WeightsOnlyCheckpointHook")],
        log_processor=dict(by_epoch=True),
        env_cfg=dict(cudnn_benchmark=False, dist_cfg=dict(backend="nccl" if torch.cuda.is_available() else "gloo")),
        log_level=log_level,
    )
    if recipe.eval:
        val = loader(
            dict(type="RetrievalEvalDataset", splits=[dataclasses.asdict(s) for s in recipe.eval],
                 tokenizer=tok, image_embeddings=d.image_embeddings),
            shuffle=False, batch_size=per_rank, drop_last=False,
        )
        cfg.update(val_dataloader=val, val_cfg=dict(), val_evaluator=dict(type="RetrievalRecallMetric"),
                   test_dataloader=val, test_cfg=dict(), test_evaluator=dict(type="RetrievalRecallMetric"))
    return cfg
