"""An MVC recipe (``data.schema: mvc``) -> an MMEngine config: video tower + dual-CLS text
encoder + ``VideoTextPretrainingLoss`` trained on clips and caption views.

What the config alone can tell is checked here, before any Runner exists: the corpus file
is there, the SMILE checkpoint was given, the batch splits over the processes, the tokenizer
loads and has a mask token, the text encoder takes every view's budget and the tokenizer's
vocabulary, and the towers fit each other (the video tokens' width is the width the fusion
layers read; both project into one space). The config is plain (``--dump-config``): the
loss's vocabulary, the tower's frames and size, the clips' normalisation are all written out.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

from vlr_plugins.integrations.mmengine.config_parts import (
    batch_layout,
    check_train_file,
    kept_samples,
    launcher_world_size,
    runtime_config,
    schedulers,
    text_encoder_config,
    train_loader,
    views_config,
)
from vlr_plugins.recipe import Recipe

__all__ = ["mvc_recipe_to_mmengine_config", "video_tower_config", "clip_normalization", "MISSING"]

#: a recipe value the run must give (``video.checkpoint: ???``)
MISSING = "???"


def video_tower_config(recipe: Recipe) -> dict[str, Any]:
    """``video.encoder`` with the clips' geometry (``num_frames``, ``image_size``) written in."""
    video = recipe.video
    assert video is not None and video.encoder is not None  # validated with the recipe
    return {**video.encoder, "num_frames": video.frames, "image_size": video.image_size}


def clip_normalization(recipe: Recipe, tower: dict[str, Any]) -> tuple[list[float], list[float]]:
    """``(mean, std)`` of the clips: ``video.mean`` / ``video.std``, else the tower config's
    ``image_mean`` / ``image_std``, else the tower class's defaults."""
    from vlr_plugins.registry import MODELS

    video = recipe.video
    if video.mean is not None and video.std is not None:
        return list(video.mean), list(video.std)
    params = inspect.signature(MODELS.get(tower["type"])).parameters
    mean = tower.get("image_mean", params["image_mean"].default if "image_mean" in params else None)
    std = tower.get("image_std", params["image_std"].default if "image_std" in params else None)
    if mean is None or std is None:
        raise recipe.error("video.mean", f"the {tower['type']} config names no normalisation: give video.mean "
                                         "and video.std")
    return [float(v) for v in mean], [float(v) for v in std]


def _tower_shape(recipe: Recipe, tower: dict[str, Any]) -> tuple[int, int]:
    """``(width, embed_dim)`` of the video tower its config builds (no weights)."""
    from vlr_plugins.registry import MODELS

    params = inspect.signature(MODELS.get(tower["type"])).parameters
    width = tower.get("width", params["width"].default)
    embed_dim = tower.get("embed_dim", params["embed_dim"].default)
    return width, embed_dim if embed_dim is not None else width


def _checkpoint(recipe: Recipe) -> str | None:
    path = recipe.video.checkpoint
    if path == MISSING:
        raise recipe.error("video.checkpoint", "the run must give the weights the video tower starts from (MVC: "
                                               "SMILE's, Stage I): --set video.checkpoint=PATH (or null for "
                                               "random weights)")
    if path is not None and not os.path.exists(path):
        raise recipe.error("video.checkpoint", f"no such file: {path}")
    return path


def _text_side(recipe: Recipe, tokenizer: str | None, width: int, embed_dim: int) -> tuple[dict[str, Any], str, Any]:
    model_cfg, tok, tokenizer_obj = text_encoder_config(recipe, tokenizer)
    if getattr(tokenizer_obj, "mask_token_id", None) is None:
        raise recipe.error("model.tokenizer", f"the tokenizer {tok} has no mask token, which masked language "
                                              "modelling (MLM) needs")
    given = model_cfg.get("video_width")
    if given is not None and given != width:
        raise recipe.error("model.video_width", f"{given}, but the video tower's tokens are {width} wide "
                                                "(video.encoder.width); leave it out to follow the tower")
    model_cfg["video_width"] = width
    text_dim = model_cfg.get("embed_dim", inspect.signature(_dual_cls()).parameters["embed_dim"].default)
    if text_dim != embed_dim:
        raise recipe.error("video.encoder.embed_dim", f"the video tower projects to {embed_dim} dims but the text "
                                                      f"encoder to {text_dim} (model.embed_dim); VTC compares them "
                                                      "in one space")
    return model_cfg, tok, tokenizer_obj


def _hard_negative_steps(recipe: Recipe, per_rank: int, world_size: int | None) -> int:
    """Iterations per epoch under ``data.hard_negatives`` (the core batch sampler's count),
    once each anchor's group fits a batch."""
    from vlr_plugins.data.hard_negative_batches import batches_per_replica

    t, spec = recipe.train, recipe.data.hard_negatives
    if spec.per_anchor >= per_rank:
        raise recipe.error("data.hard_negatives.per_anchor", f"{spec.per_anchor} hard negatives per anchor leave no "
                                                             f"room for the anchor in a batch of {per_rank} per "
                                                             "process (train.batch_size over the processes)")
    world = world_size or launcher_world_size()
    steps = batches_per_replica(kept_samples(recipe), per_rank, world, t.drop_last)
    if steps < 1:
        raise recipe.error("train.batch_size", f"{kept_samples(recipe)} samples give no full step of "
                                               f"{t.batch_size} (set drop_last: false or a smaller batch)")
    return steps


def _dual_cls() -> type:
    from vlr_plugins.text.dual_cls import DualCLSTextEncoder

    return DualCLSTextEncoder


def mvc_recipe_to_mmengine_config(
    recipe: Recipe,
    work_dir: str,
    *,
    tokenizer: str | None = None,
    world_size: int | None = None,
    launcher: str = "none",
    log_level: str = "INFO",
) -> dict[str, Any]:
    """The dict for ``mmengine.Config`` / ``Runner.from_cfg`` of an MVC recipe.

    Model: ``VideoTextPretrainingModel`` (the recipe's ``video.encoder`` with ``num_frames`` /
    ``image_size`` from ``video.frames`` / ``video.image_size``, ``video.checkpoint`` loaded
    into it; ``model`` as its text encoder, ``video_width`` the tower's; ``loss`` with the
    tokenizer's vocabulary, mask and special ids and the recipe's view names). Data:
    ``MVCVideoTextDataset`` (``data.train``, ``data.video_root``, the text views, clips read as
    ``video`` says) batched by ``vlr_mvc_collate``. Schedule: linear warm-up over
    ``train.warmup_epochs`` epochs (or ``warmup_steps`` iterations), cosine to ``min_lr``;
    ``train.batch_size`` is the global batch, split over ``world_size`` processes, each taking a
    contiguous slice of every global batch (``GlobalBatchSampler``: gathered, it is the
    one-process batch in its order, as VTM's per-row draws need); VTM's and MLM's draws are
    seeded by ``train.seed`` and the iteration (``draw_seed``).
    """
    from vlr_plugins.recipe.video_text import view_names
    from vlr_plugins.text.dual_cls import VIEWS

    t, d, video = recipe.train, recipe.data, recipe.video
    check_train_file(recipe)
    checkpoint = _checkpoint(recipe)
    per_rank, iters_per_epoch = batch_layout(recipe, world_size)
    if d.hard_negatives is not None:
        iters_per_epoch = _hard_negative_steps(recipe, per_rank, world_size)
    tower = video_tower_config(recipe)
    mean, std = clip_normalization(recipe, tower)
    width, embed_dim = _tower_shape(recipe, tower)
    model_cfg, tok, tokenizer_obj = _text_side(recipe, tokenizer, width, embed_dim)
    loss = {**recipe.loss, "views": list(view_names(recipe.text_views)), "vocab_size": len(tokenizer_obj),
            "mask_id": tokenizer_obj.mask_token_id, "special_ids": sorted(tokenizer_obj.all_special_ids)}
    dataset = dict(type="MVCVideoTextDataset", ann_file=d.train, positives=views_config(recipe.text_views.positives),
                   tokenizer=tok, views=list(VIEWS), frames=video.frames, sampler=video.sampler,
                   image_size=video.image_size, mean=mean, std=std, crop_scale=list(video.crop_scale),
                   backend=video.backend, video_root=d.video_root, check_files=video.check_files,
                   fraction=d.fraction, seed=d.seed)
    collate = dict(type="vlr_plugins.vlr_mvc_collate", pad_token_id=tokenizer_obj.pad_token_id or 0)
    model = dict(type="VideoTextPretrainingModel", text_encoder=model_cfg, video_encoder=tower, loss=loss,
                 video_checkpoint=checkpoint, video_checkpoint_layout=video.checkpoint_layout,
                 freeze_video=not video.trainable, grad_checkpointing=t.grad_checkpointing,
                 draw_seed=t.seed)
    loader = train_loader(recipe, dataset, collate, shuffle=True, batch_size=per_rank, drop_last=t.drop_last)
    if d.hard_negatives is None:
        # the gathered batch in the one-process order: VTM draws a negative per row of it
        loader["sampler"] = dict(type="GlobalBatchSampler", shuffle=True, batch_size=per_rank)
    else:
        # a DataLoader with a batch_sampler takes no drop_last: the batch sampler applies it
        loader.pop("drop_last")
        loader["batch_sampler"] = dict(type="MinedHardNegativeBatchSampler",
                                       negatives_per_anchor=d.hard_negatives.per_anchor, drop_last=t.drop_last)
    cfg = runtime_config(
        recipe, work_dir, launcher=launcher, log_level=log_level, model=model, train_dataloader=loader,
        param_scheduler=schedulers(recipe, t.epochs * iters_per_epoch, iters_per_epoch),
    )
    if not all(loss.get(f"{term}_weight", 1.0) for term in ("vtc", "vtm", "mlm")):
        # a term switched off leaves its head without gradient, which DDP must be told; the
        # Runner passes it to its default wrapper (CpuCapableDistributedDataParallel on CPU
        # processes), which naming MMDistributedDataParallel here would replace
        cfg["find_unused_parameters"] = True
    return cfg
