"""``vlr lavis-train`` / ``vlr lavis-eval`` (parsed in ``vlr_plugins.cli``): LAVIS' own
runner, with the plugin registered.

LAVIS' ``train.py`` / ``evaluate.py`` live outside its pip package and have no plug-in
hook, so this launcher does what they do (config, distributed set-up, seeds, logger,
task, datasets, model, ``RunnerBase``) after importing the plugin, plus:

- ``--cfg-path`` takes a file or a shipped run config (``lavis/c5``);
- ``--train`` / ``--image-embeddings`` set the ``vlr_paragraph`` files, ``--checkpoint``
  the trained text weights (without it ``lavis-eval`` scores the base model),
  ``--options key=value`` anything else; evaluation drops a ``vlr_paragraph`` entry whose
  files were never set and refuses a config with no ``run.test_splits``;
- ``run.output_dir`` is made absolute (LAVIS would put it inside its own package folder);
- without ``torchrun`` it starts a one-process group, since ``RunnerBase.train`` calls
  ``dist.barrier()`` unconditionally;
- without CUDA it stops with the reason: ``RunnerBase`` moves every batch through a
  ``torch.cuda.Stream`` (``PrefetchLoader``) and builds a CUDA grad scaler for AMP.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
from datetime import datetime
from pathlib import Path

import numpy as np
import torch
import yaml

from vlr_plugins.errors import UserError, as_user_error

__all__ = ["prepare_config", "run", "export", "resolve_cfg_path"]


def resolve_cfg_path(cfg_path: str) -> Path:
    p = Path(cfg_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise UserError(f"{cfg_path}: no such LAVIS run config")
        return p.resolve()
    from vlr_plugins.recipe import list_recipes

    shipped = {n: path for n, path in list_recipes().items() if n.startswith("lavis/")}
    if cfg_path in shipped:
        return shipped[cfg_path]
    raise UserError(f"{cfg_path}: no such file, and no shipped LAVIS run config of that name "
                    f"(shipped: {', '.join(shipped) or 'none'})")


def prepare_config(cfg_path: str, options=(), *, train: str | None = None, image_embeddings: str | None = None,
                   checkpoint: str | None = None, output_dir: str | None = None, evaluate: bool = False):
    """LAVIS ``Config`` for a run config plus the launcher's shortcuts (no side effects
    beyond LAVIS' own: the config is registered as ``configuration``)."""
    import vlr_plugins.integrations.lavis  # noqa: F401  (registers the plugin)
    from lavis.common.config import Config

    opts = list(options)
    ds = "datasets.vlr_paragraph.build_info"
    if train:
        opts.append(f"{ds}.annotations.train.storage={os.path.abspath(train)}")
    if image_embeddings:
        opts.append(f"{ds}.image_embeddings.storage={os.path.abspath(image_embeddings)}")
    if checkpoint:
        from vlr_plugins.checkpoint_meta import load_weights_only

        # read here, so that a missing file, a text file or a pickle of objects is one error
        # naming it, before LAVIS builds anything
        load_weights_only(checkpoint, mmap=True)
        opts.append(f"model.trained_checkpoint={os.path.abspath(checkpoint)}")
    if evaluate:
        opts.append("run.evaluate=True")
    bad = [o for o in opts if "=" not in o]
    if bad:
        raise UserError(f"--options takes KEY=VALUE pairs, found {bad}")
    path = resolve_cfg_path(cfg_path)
    raw = _read_run_config(path)
    cfg = Config(argparse.Namespace(cfg_path=str(path), options=opts))
    cfg.vlr = raw.get("vlr") or {}  # LAVIS' Config keeps only model, datasets and run
    run_cfg = cfg.run_cfg
    out = output_dir or run_cfg.get("output_dir", None) or "output"
    run_cfg.output_dir = os.path.abspath(out)
    if evaluate:
        _drop_unset_training_data(cfg)
        if not run_cfg.get("test_splits"):
            raise UserError(f"{path}: run.test_splits is empty, so there is nothing to evaluate; add "
                            "benchmarks under datasets (e.g. vlr_coco_karpathy) and test_splits: [test]")
    return cfg


def _read_run_config(path: Path) -> dict:
    """The run config as written, once its names (model arch, builders, task) are known to
    be in LAVIS' registry: LAVIS itself would fail on them with an AttributeError about
    ``None``."""
    from lavis.common.registry import registry

    with open(path, encoding="utf-8") as f:
        raw = yaml.safe_load(f) or {}
    for key in ("model", "datasets", "run"):
        if not isinstance(raw.get(key), dict):
            raise UserError(f"{path}: {key}: missing (a LAVIS run config has model, datasets and run)")
    checks = [("model.arch", raw["model"].get("arch"), registry.get_model_class, registry.list_models),
              ("run.task", raw["run"].get("task"), registry.get_task_class, registry.list_tasks)]
    checks += [(f"datasets.{name}", name, registry.get_builder_class, registry.list_datasets)
               for name in raw["datasets"]]
    for key, name, get, known in checks:
        if get(name) is None:
            vlr = [n for n in known() if n.startswith(("vlr_", "blip_retrieval_textonly"))]
            raise UserError(f"{path}: {key}: {name!r} is not registered in LAVIS "
                            f"(the plugin's: {', '.join(vlr)})")
    return raw


def _drop_unset_training_data(cfg) -> None:
    """Evaluation needs no training samples: a ``vlr_paragraph`` entry whose files were
    left at ``???`` (a shipped training config) is removed instead of failing."""
    from omegaconf import OmegaConf

    datasets = cfg.config.datasets
    if "vlr_paragraph" in datasets:
        ann = OmegaConf.select(datasets.vlr_paragraph, "build_info.annotations.train", default=None)
        if ann is None or OmegaConf.is_missing(ann, "storage"):
            del datasets["vlr_paragraph"]


def _require_cuda(cfg) -> None:
    device = str(cfg.run_cfg.get("device", "cuda"))
    if not device.startswith("cuda") or not torch.cuda.is_available():
        raise UserError(
            f"LAVIS' RunnerBase needs CUDA (run.device is {device!r}, CUDA available: "
            f"{torch.cuda.is_available()}): it moves every batch through a torch.cuda.Stream "
            "(PrefetchLoader) and uses CUDA barriers and AMP. On a CPU, drive the plugin's task "
            "directly (task.train_step / task.evaluation; see docs/lavis.md) or use `vlr train` (MMEngine).")


def _single_process_env() -> None:
    """``RunnerBase.train`` calls ``dist.barrier()`` even on one GPU: give it a group of one."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))


def _setup_seeds(cfg) -> None:
    from lavis.common.dist_utils import get_rank

    seed = int(cfg.run_cfg.get("seed", 42)) + get_rank()
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True


def run(args: argparse.Namespace, *, evaluate: bool) -> int:
    """Train (or evaluate) with LAVIS' runner, as LAVIS' train.py / evaluate.py do."""
    cfg = prepare_config(args.cfg_path, args.options, train=args.train, image_embeddings=args.image_embeddings,
                         checkpoint=args.checkpoint, output_dir=args.output_dir, evaluate=evaluate)
    _require_cuda(cfg)
    _single_process_env()

    import lavis.tasks as tasks
    from lavis.common.dist_utils import init_distributed_mode
    from lavis.common.logger import setup_logger
    from lavis.common.registry import registry

    cfg.run_cfg.dist_url = cfg.run_cfg.get("dist_url", "env://")
    init_distributed_mode(cfg.run_cfg)
    _setup_seeds(cfg)
    setup_logger()
    cfg.pretty_print()
    task = tasks.setup_task(cfg)
    # the datasets read the files and keys the run config names (a missing file, a split
    # with neither item_embeddings nor images)
    with as_user_error(FileNotFoundError, ValueError):
        datasets = task.build_datasets(cfg)
    model = task.build_model(cfg)
    runner_cls = registry.get_runner_class(cfg.run_cfg.get("runner", "runner_base"))
    runner = runner_cls(cfg=cfg, job_id=datetime.now().strftime("%Y%m%d%H%M"), task=task, model=model,
                        datasets=datasets)
    if evaluate:
        runner.evaluate(skip_reload=True)
    else:
        runner.train()
    print(f"outputs: {runner.output_dir}")
    return 0


def export(args: argparse.Namespace) -> int:
    """``vlr lavis-export``: a trained LAVIS checkpoint -> a ``vlr`` text-encoder checkpoint
    (what ``vlr export`` turns into a Hub folder). Runs on a CPU."""
    from omegaconf import OmegaConf

    from vlr_plugins.integrations.lavis.export import write_vlr_checkpoint
    from vlr_plugins.recipe import load_recipe

    from vlr_plugins._io import check_output_dir
    from vlr_plugins.errors import UsageError

    if os.path.isdir(args.out):
        raise UsageError("--out", f"{args.out} is a folder; expected the .pth file to write")
    check_output_dir(os.path.dirname(os.path.abspath(args.out)), "--out")
    cfg = prepare_config(args.cfg_path, args.options, checkpoint=args.checkpoint,
                         image_embeddings=getattr(args, "image_embeddings", None))
    from lavis.common.registry import registry

    model_cfg = cfg.model_cfg
    model = registry.get_model_class(model_cfg.arch).from_config(model_cfg).eval()
    recipe = None
    name = cfg.vlr.get("recipe")
    if name:  # the recipe the run config came from, with the loss and views the run used
        overrides: dict = {}
        if model_cfg.get("loss") is not None:
            overrides["loss"] = OmegaConf.to_container(model_cfg.loss, resolve=True)
        views = OmegaConf.select(cfg.config, "datasets.vlr_paragraph.text_views", default=None)
        if views is not None:
            overrides["text_views"] = OmegaConf.to_container(views, resolve=True)
        recipe = load_recipe(name, overrides).to_dict()
        # the store it trained against: `vlr export` bundles the image side that store records
        store = OmegaConf.select(cfg.config, "datasets.vlr_paragraph.build_info.image_embeddings.storage",
                                 default=None)
        if store:
            recipe.setdefault("data", {})["image_embeddings"] = os.path.abspath(str(store))
    out = write_vlr_checkpoint(model, args.out, recipe)
    print(f"wrote {out} (+ {out.stem}-tokenizer/); publish it from the main environment with "
          f"`vlr export {out} EXPORT_DIR` then `vlr push EXPORT_DIR REPO_ID`")
    return 0
