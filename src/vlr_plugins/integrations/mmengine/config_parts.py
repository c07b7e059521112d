"""The parts of an MMEngine config that every recipe's shares, and the checks behind them.

Used by :mod:`~vlr_plugins.integrations.mmengine.config` (paragraph recipes) and
:mod:`~vlr_plugins.integrations.mmengine.mvc_config` (MVC recipes): the training file and
the batch layout over processes, the tokenizer and the text encoder's config checked against
the views' budgets and the vocabulary (from its config; no weights read), the warm-up +
cosine schedule in iterations, and the runtime (optimiser, hooks, logging, backend). Each
error names where the value was written (the recipe file, a ``_base_``, ``--set``,
``--train``...).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
from typing import Any

import torch

from vlr_plugins.errors import ConfigError, DataFormatError
from vlr_plugins.recipe import Recipe

__all__ = ["count_samples", "kept_samples", "text_encoder_shape", "tokenizer_setting", "batch_layout",
           "check_train_file", "check_model_type", "runtime_config", "schedulers", "text_encoder_config",
           "train_loader", "views_config"]


def count_samples(path: str) -> int:
    """Number of training records without validating them (JSON Lines, Parquet, CSV/TSV)."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            return pq.ParquetFile(path).metadata.num_rows
        except (pa.ArrowException, OSError) as e:
            raise DataFormatError(path, f"not a readable Parquet file: {e}") from e
    if suffix in (".csv", ".tsv"):
        # rows, not lines: a header line, and quoted cells may span lines
        try:
            with open(path, encoding="utf-8-sig", newline="") as f:
                return max(0, sum(1 for _ in csv.reader(f, delimiter="\t" if suffix == ".tsv" else ",")) - 1)
        except (UnicodeDecodeError, csv.Error):
            return 0  # the reader reports where, when the samples are read
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def views_config(views) -> list[dict]:
    """Text views as plain dicts, for a config."""
    return [dataclasses.asdict(v) for v in views]


def tokenizer_setting(recipe: Recipe, override: str | None) -> tuple[str, str]:
    """``(tokenizer name, where it was set)``: ``--tokenizer``, else ``model.tokenizer``,
    else the pretrained model's own (``model.pretrained``)."""
    if override:
        return override, "--tokenizer"
    for key in ("tokenizer", "pretrained"):
        if recipe.model.get(key):
            return recipe.model[key], recipe.where(f"model.{key}")
    raise recipe.error("model.tokenizer", "missing: the model is built from a config, so name its tokenizer "
                                          "folder (or pass --tokenizer)")


def _special_ids(model_cfg: dict[str, Any], tokenizer: Any, recipe: Recipe) -> dict[str, Any]:
    """A random-init encoder's ``config`` with the special-token ids the recipe leaves out
    taken from the tokenizer, so that they lie in its vocabulary (BLIP's defaults are
    bert-base's: ``bos_token_id`` 30522...); ids the recipe gives must lie in it too."""
    config = model_cfg.get("config")
    if not isinstance(config, dict):
        return model_cfg
    config = dict(config)
    ids = {"pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.cls_token_id,
           "sep_token_id": tokenizer.sep_token_id}
    for key, value in ids.items():
        if key not in config and value is not None:
            config[key] = value
    vocab = config.get("vocab_size")
    if isinstance(vocab, int):
        for key in (*ids, "eos_token_id"):
            value = config.get(key)
            if isinstance(value, int) and not 0 <= value < vocab:
                raise recipe.error(f"model.config.{key}", f"{value} is outside the vocabulary "
                                                          f"(vocab_size {vocab}); leave it out to take the "
                                                          "tokenizer's")
    return {**model_cfg, "config": config}


def text_encoder_shape(recipe: Recipe, model_cfg: dict[str, Any]) -> Any:
    """The :class:`~vlr_plugins.text.blip_text_encoder.TextEncoderShape` of the recipe's text
    encoder (from its config; no weights read), or ``None`` for an encoder that cannot
    describe itself. Errors name the recipe key."""
    from vlr_plugins.registry import MODELS

    cls = MODELS.get(model_cfg["type"])
    describe = getattr(cls, "describe", None)
    if describe is None:
        return None
    args = {k: v for k, v in model_cfg.items() if k != "type"}
    try:
        return describe(**args, setting=recipe.where("model.pretrained"))
    except ConfigError as e:
        raise recipe.error("model.config", str(e)) from None
    except ValueError as e:  # arguments no encoder is built from
        raise recipe.error("model.pretrained" if "pretrained" in str(e) else "model", str(e)) from None


def _check_against_encoder(recipe: Recipe, shape: Any, tokenizer: Any) -> None:
    """Every token budget fits the encoder's positions; every token id its vocabulary."""
    budgets = [(f"text_views.{kind}[{i}].max_tokens", v.max_tokens)
               for kind in ("positives", "negatives")
               for i, v in enumerate(getattr(recipe.text_views, kind))]
    budgets += [(f"eval[{i}].max_tokens", s.max_tokens) for i, s in enumerate(recipe.eval)]
    for key, budget in budgets:
        if budget > shape.max_positions:
            raise recipe.error(key, f"{budget} tokens exceed the text encoder's {shape.max_positions} positions "
                                    "(model.config.max_position_embeddings); lower the budget, or extend the "
                                    "encoder (vlr_plugins.text.extend_text_context)")
    if len(tokenizer) > shape.vocab_size:
        raise recipe.error("model.config.vocab_size" if "config" in recipe.model else "model.tokenizer",
                           f"the tokenizer has {len(tokenizer)} tokens but the text encoder's vocabulary "
                           f"holds {shape.vocab_size}: token ids past it have no embedding")


def schedulers(recipe: Recipe, total_iters: int, iters_per_epoch: int) -> list[dict]:
    t = recipe.train
    warmup = min(t.warmup_epochs * iters_per_epoch if t.warmup_epochs else t.warmup_steps, total_iters)
    out: list[dict] = []
    # MMEngine's LinearLR reaches the base lr at step end - 1 (0.001, 0.334, 0.667, 1.0 for
    # end = 4), so a warm-up of one step is none: LinearLR(end=1) would hold the start factor
    # for the whole run (it never steps again)
    if warmup > 1:
        out.append(dict(type="LinearLR", start_factor=t.warmup_start_factor, by_epoch=False,
                        begin=0, end=warmup))
    if t.schedule == "cosine" and warmup < total_iters:
        out.append(dict(type="CosineAnnealingLR", T_max=total_iters - warmup, eta_min=t.min_lr,
                        by_epoch=False, begin=warmup, end=total_iters))
    return out


def check_train_file(recipe: Recipe) -> str:
    """``data.train``, once it names a file that exists."""
    value = recipe.data.train
    if not value:
        raise recipe.error("data.train", "missing: set it in the recipe or on the command line (--train)")
    if not os.path.exists(value):
        raise recipe.error("data.train", f"no such file: {value}")
    if os.path.isdir(value):
        raise recipe.error("data.train", f"{value} is a folder; expected a file of training samples "
                                         "(.jsonl, .parquet, .csv)")
    return value


#: where each MMEngine launcher finds the number of processes (what its ``init_dist`` reads)
_WORLD_SIZE_VARS = {"pytorch": ("WORLD_SIZE",), "slurm": ("SLURM_NTASKS", "WORLD_SIZE"),
                    "mpi": ("OMPI_COMM_WORLD_SIZE", "WORLD_SIZE"), "none": ("WORLD_SIZE",)}


def launcher_world_size(launcher: str = "none") -> int:
    """The number of processes of a run started by MMEngine's ``launcher``, read before MMEngine
    starts its process group (the config is built first): torchrun's ``WORLD_SIZE``, srun's
    ``SLURM_NTASKS``, Open MPI's ``OMPI_COMM_WORLD_SIZE`` (``WORLD_SIZE`` where that is unset;
    1 where none is set)."""
    for name in _WORLD_SIZE_VARS.get(launcher, ("WORLD_SIZE",)):
        value = os.environ.get(name)
        if value:
            try:
                world = int(value)
            except ValueError:
                raise ConfigError(f"${name}={value!r}: expected the number of processes") from None
            if world < 1:
                raise ConfigError(f"${name}={value!r}: expected the number of processes (>= 1)")
            return world
    return 1


def batch_layout(recipe: Recipe, world_size: int | None) -> tuple[int, int]:
    """``(batch per process, iterations per epoch)``: ``train.batch_size`` (the global
    contrastive batch) split over ``world_size`` processes (default :func:`launcher_world_size`
    without a launcher: ``$WORLD_SIZE``), and the samples of ``data.train`` (after
    ``data.fraction``) it makes batches of."""
    t, d = recipe.train, recipe.data
    world = world_size or launcher_world_size()
    if t.batch_size % world:
        raise recipe.error("train.batch_size", f"{t.batch_size} does not split evenly over {world} processes")
    per_rank = t.batch_size // world
    n = kept_samples(recipe)
    n_rank = math.ceil(n / world)
    iters_per_epoch = n_rank // per_rank if t.drop_last else math.ceil(n_rank / per_rank)
    if iters_per_epoch < 1:
        raise recipe.error("train.batch_size", f"{n} samples give no full batch of {t.batch_size} "
                                               "(set drop_last: false or a smaller batch)")
    return per_rank, iters_per_epoch


def kept_samples(recipe: Recipe) -> int:
    """How many samples of ``data.train`` a run trains on: all, or ``data.fraction`` of them."""
    d = recipe.data
    total = count_samples(d.train)
    if total == 0:
        raise recipe.error("data.train", f"{d.train} holds no samples")
    return max(1, round(d.fraction * total)) if d.fraction < 1 else total


def text_encoder_config(recipe: Recipe, tokenizer: str | None) -> tuple[dict[str, Any], str, Any]:
    """``(the text encoder's config, the tokenizer's name, the tokenizer)``: the recipe's model
    with the special-token ids it leaves out taken from the tokenizer, checked against every
    view's budget and the tokenizer's vocabulary."""
    from vlr_plugins.text.pretrained import load_tokenizer

    check_model_type(recipe)
    tok, tok_setting = tokenizer_setting(recipe, tokenizer)
    tokenizer_obj = load_tokenizer(tok, tok_setting)
    model_cfg = _special_ids(dict(recipe.model), tokenizer_obj, recipe)
    if "tokenizer" not in model_cfg and model_cfg.get("pretrained") != tok:
        model_cfg["tokenizer"] = tok
    shape = text_encoder_shape(recipe, model_cfg)
    if shape is not None:
        _check_against_encoder(recipe, shape, tokenizer_obj)
    return model_cfg, tok, tokenizer_obj


def check_model_type(recipe: Recipe) -> None:
    from vlr_plugins.registry import MODELS

    if recipe.model["type"] not in MODELS:
        hint = " (open_clip recipes run with `vlr openclip-train`)" if recipe.model["type"] == "open_clip" else ""
        raise recipe.error("model.type", f"{recipe.model['type']!r} is not a registered text encoder{hint}; "
                                         f"registered: {', '.join(MODELS.names())}")


def runtime_config(recipe: Recipe, work_dir: str, *, model: dict, train_dataloader: dict, param_scheduler: list,
                   launcher: str, log_level: str) -> dict[str, Any]:
    """The MMEngine config of ``model`` trained on ``train_dataloader`` under ``param_scheduler``,
    with what every recipe's config shares: scope, seed, epochs, AdamW (under
    ``AmpOptimWrapper`` with ``train.amp``), hooks (checkpoints every ``checkpoint_interval``
    epochs, weights-only and resumable), logging and the distributed backend."""
    t = recipe.train
    optim_wrapper = dict(
        type="AmpOptimWrapper" if t.amp else "OptimWrapper",
        optimizer=dict(type="AdamW", lr=t.lr, weight_decay=t.weight_decay, betas=t.betas),
        clip_grad=dict(max_norm=t.grad_clip) if t.grad_clip else None,
    )
    if t.amp and t.amp_dtype != "float16":  # AmpOptimWrapper's default is float16
        optim_wrapper["dtype"] = t.amp_dtype
    return dict(
        default_scope="vlr_plugins",
        custom_imports=dict(imports=["vlr_plugins.integrations.mmengine"], allow_failed_imports=False),
        work_dir=work_dir,
        experiment_name=recipe.name,
        launcher=launcher,
        randomness=dict(seed=t.seed),
        vlr_recipe=recipe.to_dict(),
        model=model,
        train_dataloader=train_dataloader,
        train_cfg=dict(by_epoch=True, max_epochs=t.epochs, val_interval=1),
        optim_wrapper=optim_wrapper,
        param_scheduler=param_scheduler,
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


def train_loader(recipe: Recipe, dataset: dict, collate_fn: dict, *, shuffle: bool, batch_size: int,
                 drop_last: bool) -> dict[str, Any]:
    """A data loader section: the recipe's workers, MMEngine's ``DefaultSampler``."""
    workers = recipe.train.num_workers
    return dict(batch_size=batch_size, num_workers=workers, persistent_workers=workers > 0, drop_last=drop_last,
                sampler=dict(type="DefaultSampler", shuffle=shuffle), collate_fn=collate_fn, dataset=dataset)
