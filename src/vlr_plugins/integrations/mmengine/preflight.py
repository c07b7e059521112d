"""Before a Runner starts: the run's data checked against the model (stored image
embeddings, or an MVC run's videos and mined hard negatives), and nothing left behind by a
run that stops on bad input.

MMEngine's Runner creates the work dir, a timestamped log folder and a copy of the
config as it starts, and builds its datasets only when training starts, so a bad sample
file would be found after a few hundred lines of log, leaving those files behind.
:func:`check_run_inputs` builds the datasets first, exactly as the Runner will (every
sample read and checked, every image id looked up in its store, one row of every store
shard read) and checks each store's width against the text encoder's output;
:func:`nothing_left_on_failure` removes what a run created when it stops on bad input
before writing a checkpoint.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlr_plugins.data.embedding_store import EmbeddingStore
from vlr_plugins.errors import ConfigError, DataFormatError, MissingFileError, UsageError, UserError
from vlr_plugins.integrations.mmengine.config import text_encoder_shape
from vlr_plugins.integrations.mmengine.dataset import (
    ParagraphTextViewsDataset,
    RetrievalEvalDataset,
)
from vlr_plugins.recipe import Recipe

__all__ = ["RunInputs", "check_loss_arguments", "check_run_inputs", "check_schedule", "native_train_samples", "check_output_folder", "check_output_file", "check_resume_checkpoint",
           "check_resume", "check_launcher", "check_sharded_clipping", "check_sharded_wrapper", "nothing_left_on_failure"]

#: what each MMEngine launcher reads from the environment its launcher sets
_LAUNCHER_ENV = {"pytorch": ("RANK", "torchrun (or python -m torch.distributed.run)"),
                 "slurm": ("SLURM_PROCID", "srun"), "mpi": ("OMPI_COMM_WORLD_RANK", "mpirun (Open MPI)")}


@dataclass(frozen=True)
class RunInputs:
    """What :func:`check_run_inputs` found: training samples kept (after ``data.fraction``),
    the image embeddings' width (an MVC run: the video-text space's), the evaluation items
    (0 without ``eval``) and, under ``data.hard_negatives``, how many samples have a mined
    hard negative among them (0 otherwise)."""

    samples: int
    dim: int
    eval_items: int = 0
    with_hard_negatives: int = 0


def _check_width(recipe: Recipe, key: str, path: str, dim: int, shape: Any) -> None:
    if shape is not None and dim != shape.embed_dim:
        raise recipe.error(key, f"the embedding store {path} holds {dim}-d image embeddings, but the text "
                                f"encoder outputs {shape.embed_dim}-d vectors (model.embed_dim); they must "
                                "share one space: precompute with the model's image tower, or set "
                                f"model.embed_dim: {dim} for a model built from a config")


#: characters per token of a view's budget past which a text is warned of: far above any real
#: text's (English: ~4-5 characters a token); tokenizing it whole every epoch is what costs
_CHARS_PER_BUDGET_TOKEN = 64


def _warn_of_long_texts(recipe: Recipe, samples: Any) -> None:
    """A ``warning:`` line (from the first process) per view whose texts run far past its token
    budget: they are truncated to it, but each epoch tokenizes them whole (a 4M-word paragraph
    made a 200-second epoch of a tiny file)."""
    if os.environ.get("RANK", "0") != "0":
        return
    for view in recipe.text_views.all:
        limit = view.max_tokens * _CHARS_PER_BUDGET_TOKEN
        longest, where, count = 0, None, 0
        for sample in samples:
            for name in view.fields:
                value = getattr(sample, name, None)
                for text in value if isinstance(value, tuple) else (value,) if value else ():
                    if len(text) > limit:
                        count += 1
                        if len(text) > longest:
                            longest, where = len(text), (sample.id, name)
        if count:
            print(f"warning: data.train {recipe.data.train}: {count} text(s) of view {'/'.join(view.fields)} are "
                  f"longer than {limit:,} characters (the longest: sample {where[0]!r}, field {where[1]!r}, "
                  f"{longest:,} characters); they are cut to max_tokens {view.max_tokens}, but every epoch "
                  "tokenizes them whole: shorten them in the file", file=sys.stderr)


def check_run_inputs(recipe: Recipe, cfg: dict[str, Any]) -> RunInputs:
    """Build the datasets of ``cfg`` (from :func:`recipe_to_mmengine_config`) as the Runner
    will, and check every store's width against the recipe's text encoder (and
    ``train.amp`` against the machine).

    Raises a :class:`~vlr_plugins.errors.UserError` naming the file, record and field
    (:class:`~vlr_plugins.errors.DataFormatError`), every missing embedding
    (:class:`~vlr_plugins.errors.MissingEmbeddingsError`), or the recipe key and where it
    was set (:class:`~vlr_plugins.recipe.RecipeError`).
    """
    from mmengine.device import get_device

    if recipe.train.amp and get_device() == "cpu":
        raise recipe.error("train.amp", "mixed precision (AmpOptimWrapper) runs on a GPU (cuda, npu, mlu, musa); "
                                        "this machine has none: set train.amp: false")
    if recipe.data.schema == "mvc":
        return _check_video_text_inputs(recipe, cfg)
    shape = text_encoder_shape(recipe, cfg["model"]["text_encoder"])
    args = {k: v for k, v in cfg["train_dataloader"]["dataset"].items() if k != "type"}
    try:
        train = ParagraphTextViewsDataset(**args)
    except FileNotFoundError as e:  # a store folder without its index
        raise recipe.error("data.image_embeddings", str(e)) from None
    except UserError:
        raise
    except ValueError as e:  # a file suffix no reader takes
        raise recipe.error("data.train", str(e)) from None
    store = train.media.store
    _check_width(recipe, "data.image_embeddings", args["image_embeddings"], store.dim, shape)
    _warn_of_long_texts(recipe, train.samples)
    eval_items = 0
    if recipe.eval:
        for i, split in enumerate(recipe.eval):
            if not os.path.isfile(split.ann_file):
                raise recipe.error(f"eval[{i}].ann_file", f"no such file: {split.ann_file}")
            path = split.image_embeddings or recipe.data.image_embeddings
            key = f"eval[{i}].image_embeddings" if split.image_embeddings else "data.image_embeddings"
            if not os.path.isdir(path):
                raise recipe.error(key, f"no such folder: {path}")
        args = {k: v for k, v in cfg["val_dataloader"]["dataset"].items() if k != "type"}
        try:
            val = RetrievalEvalDataset(**args)
        except FileNotFoundError as e:
            raise recipe.error("eval", str(e)) from None
        for i, split in enumerate(recipe.eval):
            if split.image_embeddings:
                dim = EmbeddingStore(split.image_embeddings).dim
                _check_width(recipe, f"eval[{i}].image_embeddings", split.image_embeddings, dim, shape)
        eval_items = len(val)
    return RunInputs(samples=len(train), dim=store.dim, eval_items=eval_items)


def _check_video_text_inputs(recipe: Recipe, cfg: dict[str, Any]) -> RunInputs:
    """An MVC run's corpus read and checked as the Runner will read it: every record, every
    sample against the views, every video file there (``video.check_files``)."""
    from vlr_plugins.integrations.mmengine.mvc_dataset import MVCVideoTextDataset

    args = {k: v for k, v in cfg["train_dataloader"]["dataset"].items() if k != "type"}
    try:
        train = MVCVideoTextDataset(**args)
    except UserError:
        raise
    except ValueError as e:  # a file suffix no reader takes
        raise recipe.error("data.train", str(e)) from None
    with_negatives = _check_hard_negatives(recipe, train.samples) if recipe.data.hard_negatives is not None else 0
    shape = text_encoder_shape(recipe, cfg["model"]["text_encoder"])
    return RunInputs(samples=len(train), dim=shape.embed_dim if shape is not None else 0,
                     with_hard_negatives=with_negatives)


def _check_hard_negatives(recipe: Recipe, samples: list) -> int:
    """How many ``samples`` have a hard-negative video among them; ``data.hard_negatives``
    needs one at least (a corpus mined, and its negatives among the samples ``data.fraction``
    keeps)."""
    from vlr_plugins.data.hard_negative_batches import negative_indices

    found = sum(1 for row in negative_indices(samples) if row)
    if found:
        return found
    d = recipe.data
    named = any(s.hard_negatives for s in samples)
    why = ("none of the hard negatives its records name is among the samples data.fraction keeps" if named
           else "no record of it has hard_negatives")
    raise recipe.error("data.hard_negatives", f"batches each video with its mined hard negatives, but {d.train}: "
                                              f"{why}; mine them first (vlr mine mvc {d.train} --model MODEL --out "
                                              "mined.jsonl, then --train mined.jsonl), or leave "
                                              "data.hard_negatives out")


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_output_folder(path: str | os.PathLike, option: str) -> None:
    """``path`` can be a run's output folder: a folder, or creatable in the first folder
    above it that exists, which must be writable. Errors name ``option``."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UsageError(option, f"{p} is a file; expected a folder (or a path where one can be created)")
    base = _nearest_existing(p)
    if not base.is_dir():
        raise UsageError(option, f"cannot create {p}: {base} is a file")
    if not os.access(base, os.W_OK | os.X_OK):
        raise UsageError(option, f"cannot write to {base} (permission denied)")


def check_output_file(path: str | os.PathLike, option: str) -> None:
    """``path`` can be written as a file: not a folder, in a folder that exists and is
    writable. Errors name ``option``."""
    p = Path(path)
    if p.is_dir():
        raise UsageError(option, f"{p} is a folder; expected a file path")
    parent = p.absolute().parent
    if not parent.is_dir():
        raise UsageError(option, f"no such folder: {p.parent} (create it first)")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise UsageError(option, f"cannot write {p} (permission denied)")


#: the file of a DeepSpeed checkpoint folder that holds the weights and the runner's state
_DEEPSPEED_MODEL_STATES = "mp_rank_00_model_states.pt"


def _sharded_checkpoint_file(folder: Path, option: str) -> Path:
    """This process's file of an FSDP ``state_dict_cfg: local`` checkpoint (``rank{i}.pth``
    for each of the processes that saved it), refused when this run has another number of
    processes: each file holds its rank's shards, cut for that many."""
    saved = sum(1 for f in folder.glob("rank*.pth") if f.stem[4:].isdigit())
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if saved != world or not all((folder / f"rank{i}.pth").is_file() for i in range(saved)):
        raise UsageError(option, f"{folder} is a sharded FSDP checkpoint (state_dict_cfg: local) of {saved} "
                                 f"processes (rank0.pth .. rank{saved - 1}.pth); this run has {world}: resume it "
                                 f"with {saved} processes (torchrun --nproc-per-node), or save with state_dict_cfg: "
                                 "full to change the number")
    return folder / f"rank{os.environ.get('RANK', '0')}.pth"


def check_resume_checkpoint(path: str | os.PathLike, option: str = "--resume",
                            train_cfg: Mapping[str, Any] | None = None,
                            settings: Mapping[str, str] | None = None) -> None:
    """``path`` is a checkpoint MMEngine can resume from: a file that
    ``torch.load(weights_only=True)`` reads (what ``WeightsOnlyCheckpointHook`` writes)
    holding a ``state_dict`` (or, from ``DeepSpeedStrategy``, a folder whose
    ``mp_rank_00_model_states.pt`` is such a file holding the weights as ``module``; from
    ``FSDPStrategy`` with ``state_dict_cfg: local``, a folder of one such ``rank{i}.pth`` per
    process, saved by as many processes as this run has), and
    (given the run's ``train_cfg``) written by a run of the
    same length: MMEngine restores the checkpoint's parameter schedules as they were built,
    so a longer run would spend its extra epochs at the schedule's final learning rate and
    a shorter one stop mid-schedule. Errors name ``option`` and the setting to change
    (``settings``: the user's name of each ``train_cfg`` key, default ``train_cfg.<key>``)."""
    from vlr_plugins.checkpoint_meta import load_weights_only

    p, weights = Path(path), "state_dict"
    if p.is_dir() and (p / _DEEPSPEED_MODEL_STATES).is_file():
        p, weights = p / _DEEPSPEED_MODEL_STATES, "module"
    elif p.is_dir() and (p / "rank0.pth").is_file():
        p = _sharded_checkpoint_file(p, option)
    if not p.is_file():
        raise MissingFileError(f"{option}: no checkpoint at {p}" + (" (it is a folder)" if p.is_dir() else ""))
    try:
        # memory-mapped when it can be (torch.save's zip format): the weights are not read here
        ckpt = load_weights_only(p, mmap=True)
    except DataFormatError as e:
        raise UsageError(option, str(e)) from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get(weights), dict):
        raise UsageError(option, f"{p} holds no {weights!r}: not a checkpoint of `vlr train`")
    recorded = (ckpt.get("meta") or {}).get("vlr_schedule") or {}
    for key, then in recorded.items():
        now = (train_cfg or {}).get(key)
        if now is not None and now != then:
            unit = key.removeprefix("max_")
            setting = (settings or {}).get(key, f"train_cfg.{key}")
            raise UsageError(option, f"{p} comes from a run of {then} {unit}; this one asks for {now} (train_cfg."
                                     f"{key}). A resumed run keeps the checkpoint's learning-rate schedule, built for "
                                     f"{then} {unit}: resume with --set {setting}={then}, or start a new run in "
                                     f"another --work-dir")


def check_resume(resume: str, work_dir: str | os.PathLike, option: str = "--resume",
                 train_cfg: Mapping[str, Any] | None = None, settings: Mapping[str, str] | None = None) -> None:
    """``resume`` is a checkpoint :func:`check_resume_checkpoint` accepts (for a run of
    ``train_cfg``; ``settings`` as there), or ``auto``: the latest checkpoint MMEngine recorded in ``work_dir`` (its
    ``last_checkpoint`` file), if there is one (without one, training starts afresh, as
    MMEngine does, and a ``note:`` line on stderr says so: a requeued job's first start)."""
    if resume != "auto":
        check_resume_checkpoint(resume, option, train_cfg, settings)
        return
    last = Path(work_dir) / "last_checkpoint"
    if last.is_file():
        recorded = last.read_text(encoding="utf-8").strip()
        check_resume_checkpoint(recorded, f"{option} (the latest checkpoint, named in {last})", train_cfg, settings)
    elif os.environ.get("RANK", "0") == "0":  # said once, by the first process
        print(f"note: {option}: no checkpoint to resume from in {work_dir} (no last_checkpoint there yet): "
              "training starts from the beginning", file=sys.stderr)


def native_train_samples(cfg: Any) -> int | None:
    """The training samples of an MMEngine config's ``train_dataloader.dataset``, built as the
    Runner will build it (its file read; a model's tokenizer or processor is loaded only on first
    use); ``None`` where it cannot be built here (the Runner then reports it)."""
    from vlr_plugins.integrations.mmengine.registry import DATASETS

    try:
        return len(DATASETS.build(cfg.train_dataloader.dataset))
    except UserError:
        raise
    except Exception:  # noqa: BLE001 - not this check's to report
        return None


def check_schedule(cfg: Any, samples: int | None, world: int, option: str = "--set") -> None:
    """Every ``param_scheduler`` of ``cfg`` spans at least one step at the run's length: MMEngine
    turns an epoch-based scheduler with ``convert_to_iter_based`` into iterations as
    ``int(begin * L)`` .. ``int(end * L)`` (``L`` the loader's iterations per epoch), and raises
    "end should be larger than begin" once the model is loaded when a fractional warm-up rounds
    to none (CaRe's 0.4-epoch warm-up on a file of a few triplets). Checked before any model loads;
    a :class:`~vlr_plugins.errors.ConfigError` naming the scheduler, its bounds and the run's size."""
    import math

    schedulers = cfg.get("param_scheduler") or []
    schedulers = [schedulers] if isinstance(schedulers, Mapping) else list(schedulers)
    if not schedulers or samples is None:
        return
    loader = cfg.train_dataloader
    batch = int(loader.get("batch_size", 1))
    per_rank = math.ceil(samples / world)  # DefaultSampler's round_up
    drop_last = bool(loader.get("drop_last", False))
    length = per_rank // batch if drop_last else math.ceil(per_rank / batch)
    size = (f"{length} iteration(s) an epoch: {samples} training samples, batch {batch} per process x {world} "
            f"process(es)")
    if length < 1:
        raise ConfigError(f"train_dataloader: {size}: no full batch; use a smaller batch_size or drop_last: false")
    for i, sched in enumerate(schedulers):
        if not isinstance(sched, Mapping):
            continue
        by_epoch = sched.get("by_epoch", True)
        begin, end = sched.get("begin", 0), sched.get("end", math.inf)
        if by_epoch and sched.get("convert_to_iter_based", False):
            first, last = int(begin * length), (int(end * length) if end != math.inf else math.inf)
            unit = f"epochs, iterations {first} to {last} at {size}"
        else:
            first, last = begin, end
            unit = "epochs" if by_epoch else "iterations"
        if last <= first:
            raise ConfigError(f"param_scheduler[{i}] ({sched.get('type')}): begin {begin}, end {end} ({unit}): it "
                              f"spans no step, which MMEngine refuses (end must be larger than begin); train on "
                              f"more samples, a smaller batch, or set its bounds with {option} param_scheduler=[...]")
        ramps = sched.get("type") in ("LinearLR", "LinearParamScheduler", "LinearMomentum")
        start, stop = sched.get("start_factor", 1.0 / 3), sched.get("end_factor", 1.0)
        if ramps and last - first == 1 and start != stop:
            raise ConfigError(f"param_scheduler[{i}] ({sched.get('type')}): begin {begin}, end {end} ({unit}): a ramp "
                              f"over one step, which MMEngine's LinearLR never completes (it takes end - begin - 1 "
                              f"steps: the factor would stay {start:g} for the whole run); train on more samples, a "
                              f"smaller batch, or set its bounds with {option} param_scheduler=[...]")


def check_loss_arguments(cfg: Any, key: str = "model.loss") -> None:
    """A native config's loss (``model.loss``: a core loss of :data:`~vlr_plugins.registry.LOSSES`)
    takes the arguments it is given: a key it has no parameter for (``--set model.loss.cache_chunk=2``
    on a loss without gradient caching) is one :class:`~vlr_plugins.errors.ConfigError` naming the
    key and the loss's arguments, before any model loads (MMEngine raised a TypeError traceback
    while building the model)."""
    import difflib
    import inspect

    from vlr_plugins.registry import LOSSES

    loss = (cfg.get("model") or {}).get("loss")
    if not isinstance(loss, Mapping) or not isinstance(loss.get("type"), str) or loss["type"] not in LOSSES:
        return
    params = inspect.signature(LOSSES.get(loss["type"])).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    known = [n for n in params if n != "self"]
    for name in loss:
        if name != "type" and name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            raise ConfigError(f"{key}.{name}: {loss['type']} takes no argument {name!r}"
                              + (f" (did you mean {close[0]!r}?)" if close else "")
                              + f"; its arguments: {', '.join(known) or 'none'}")


def check_sharded_clipping(cfg: Any) -> None:
    """Under ``FSDPStrategy`` a config's ``optim_wrapper.clip_grad`` (by norm) is clipped by the
    whole gradient's norm with FSDP's own ``clip_grad_norm_``
    (:mod:`~vlr_plugins.integrations.mmengine.strategies`): a key that clip does not take is one
    :class:`~vlr_plugins.errors.ConfigError`, before any process starts its model."""
    strategy, optim = cfg.get("strategy"), cfg.get("optim_wrapper")
    if not (isinstance(strategy, Mapping) and str(strategy.get("type", "")).endswith("FSDPStrategy")
            and isinstance(optim, Mapping)):
        return
    clip = optim.get("clip_grad")
    if isinstance(clip, Mapping) and clip.get("type", "norm") == "norm":
        from vlr_plugins.integrations.mmengine.strategies import fsdp_clip_kwargs

        fsdp_clip_kwargs(clip)


def check_sharded_wrapper(cfg: Any) -> None:
    """MMEngine's FSDP model wrapper (``model_wrapper_cfg`` ``MMFullyShardedDataParallel``)
    under the plain ``Runner`` is one :class:`~vlr_plugins.errors.ConfigError`, before any
    process starts: that Runner broadcasts and saves the wrapped module's own parameters
    (``Runner._init_model_weights``, ``get_state_dict``), which FSDP holds as flat shards
    (on two CPU processes the broadcast is a collective mismatch: "Received data size doesn't
    match expected size"); FSDP trains on ``FlexibleRunner`` with ``FSDPStrategy``."""
    wrapper, runner = cfg.get("model_wrapper_cfg"), cfg.get("runner_type") or "Runner"
    if (isinstance(wrapper, Mapping) and str(wrapper.get("type", "")).endswith("FullyShardedDataParallel")
            and not (isinstance(runner, str) and runner.endswith("FlexibleRunner"))):
        raise ConfigError(f"model_wrapper_cfg: {wrapper['type']} under MMEngine's {runner}, which broadcasts and "
                          f"saves the wrapped model's own parameters where FSDP holds flat shards; train FSDP with "
                          f"runner_type=FlexibleRunner 'strategy={{type: FSDPStrategy}}' (docs/scaling.md)")


def check_launcher(launcher: str, option: str = "--launcher") -> None:
    """A distributed ``launcher`` runs under the program that starts its processes (MMEngine
    reads the rank it sets); errors name ``option``."""
    if launcher in _LAUNCHER_ENV:
        variable, program = _LAUNCHER_ENV[launcher]
        if variable not in os.environ:
            raise UsageError(option, f"{launcher} needs the processes started by {program}, which sets {variable}; "
                                     f"it is not set (run without --launcher for one process)")


def _has_checkpoint(work_dir: Path, before: set[str]) -> bool:
    return any(p.suffix == ".pth" for p in work_dir.glob("*") if p.name not in before)


@contextmanager
def nothing_left_on_failure(work_dir: str | os.PathLike) -> Iterator[None]:
    """Inside the block, a :class:`~vlr_plugins.errors.UserError` (bad input found once the
    Runner exists: a model that cannot be loaded...) removes what the block created in
    ``work_dir`` -- the folder itself if it was new -- unless a checkpoint was written;
    other exceptions leave the log for the bug report."""
    work_dir = Path(work_dir)
    existed = work_dir.is_dir()
    before = {p.name for p in work_dir.iterdir()} if existed else set()
    try:
        yield
    except UserError:
        if work_dir.is_dir() and not _has_checkpoint(work_dir, before):
            if not existed:
                shutil.rmtree(work_dir, ignore_errors=True)
            else:
                for p in work_dir.iterdir():
                    if p.name in before:
                        continue
                    if p.is_dir():
                        shutil.rmtree(p, ignore_errors=True)
                    else:
                        p.unlink(missing_ok=True)
        raise
