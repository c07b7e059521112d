"""``vlr train``: a recipe (or a recipe that is an MMEngine config already, such as CaRe's)
trained with MMEngine's Runner, through one run sequence.

This module lives beside the MMEngine package, not in it: importing
``vlr_plugins.integrations.mmengine`` creates its registries (and so imports MMEngine), and
``vlr --help`` must work where MMEngine is not installed (the LAVIS environment).

Every run is checked before the Runner starts (work dir, ``--dump-config`` target,
``--resume``, launcher, and for a recipe its samples and stores:
:mod:`vlr_plugins.integrations.mmengine.preflight`), and
a run that stops on bad input leaves nothing behind.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from vlr_plugins.errors import UsageError
from vlr_plugins.recipe.overrides import parse_set_items

__all__ = ["add_cli", "cmd_train"]


@dataclass
class _Plan:
    """A run about to start: its MMEngine config, work dir and what is said when it starts."""

    cfg: Any
    work_dir: str
    banner: Callable[[Any], str]  # the checked inputs (or None) -> "training NAME ... in WORK_DIR"
    check_inputs: Callable[[], Any] = lambda: None
    test: bool = False  # the recipe has an eval section: runner.test() after training
    report_checkpoint: bool = False


def _dotted_set(items: Sequence[str]) -> dict[str, Any]:
    """``--set`` items as MMEngine's dotted overrides; a mapping value replaces the whole
    section (``optim_wrapper={type: OptimWrapper, optimizer: {...}}``) instead of merging."""
    parse_set_items(items)  # the same checks and messages as for recipes
    out: dict[str, Any] = {}
    for item in items:
        key, _, raw = item.partition("=")
        value = yaml.safe_load(raw)
        out[key.strip()] = {"_delete_": True, **value} if isinstance(value, dict) else value
    return out


def _refuse_other_command(name: str, path: Any) -> None:
    """``vlr train`` given a shipped file that another command runs (a LAVIS run config, a
    generation pipeline) says which command, instead of failing on the file's keys."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return  # the recipe loader reports it
    block = raw.get("vlr") if isinstance(raw, dict) else None
    kind = block.get("kind") if isinstance(block, dict) else None
    if kind == "generate":
        pipeline = block.get("name") or name
        raise UsageError("recipe", f"{name} is a generation pipeline, not a training recipe: run it with "
                                   f"`vlr generate {pipeline} --input ... --out ...` (docs/generate.md)")
    if isinstance(raw, dict) and "run" in raw and "datasets" in raw and isinstance(block, dict):
        raise UsageError("recipe", f"{name} is a LAVIS run config: train it with `vlr lavis-train --cfg-path "
                                   f"{name} ...` in the LAVIS environment (docs/lavis.md)")


def _native_plan(args: argparse.Namespace, path: str) -> _Plan:
    """``vlr train care/...``: a recipe that is an MMEngine config already (:mod:`vlr_plugins.integrations.mmengine.native`)."""
    from vlr_plugins.integrations.mmengine.native import load_native_config
    from vlr_plugins.integrations.mmengine.config_parts import launcher_world_size
    from vlr_plugins.integrations.mmengine.preflight import (
        check_loss_arguments,
        check_output_file,
        check_output_folder,
        check_resume,
        check_schedule,
        check_sharded_clipping,
        check_sharded_wrapper,
        native_train_samples,
    )

    if args.image_embeddings or args.tokenizer:
        option = "--image-embeddings" if args.image_embeddings else "--tokenizer"
        raise UsageError(option, f"{args.recipe} is an MMEngine config: set its keys with --set")
    cfg, vlr = load_native_config(path, overrides=_dotted_set(args.set or []), train=args.train,
                                  work_dir=args.work_dir)
    cfg.launcher = args.launcher
    check_loss_arguments(cfg)
    check_sharded_clipping(cfg)
    check_sharded_wrapper(cfg)
    check_output_folder(cfg.work_dir, "--work-dir")
    if args.resume:
        check_resume(args.resume, cfg.work_dir, train_cfg=cfg.get("train_cfg"))
    if args.dump_config:
        check_output_file(args.dump_config, "--dump-config")
    name = vlr.get("name", args.recipe)
    return _Plan(cfg, cfg.work_dir, banner=lambda _: f"training {name} in {cfg.work_dir}",
                 check_inputs=lambda: check_schedule(cfg, native_train_samples(cfg), launcher_world_size(args.launcher)))


def _recipe_plan(args: argparse.Namespace) -> _Plan:
    """A vlr recipe (paragraph/*, mvc/*): loaded with its overrides, checked, then made an MMEngine config."""
    from mmengine.config import Config

    from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config
    from vlr_plugins.integrations.mmengine.preflight import (
        check_output_file,
        check_output_folder,
        check_resume,
        check_run_inputs,
    )
    from vlr_plugins.recipe import Overrides, load_recipe

    # each value is blamed on where it was given: the file, --set, --train, --image-embeddings
    layers = [Overrides(parse_set_items(args.set or []), "--set")]
    layers += [Overrides({"data": {key: value}}, option, keyed=False)
               for key, value, option in (("train", args.train, "--train"),
                                          ("image_embeddings", args.image_embeddings, "--image-embeddings"))
               if value]
    recipe = load_recipe(args.recipe, layers)
    work_dir = args.work_dir or f"work_dirs/{recipe.name}"
    check_output_folder(work_dir, "--work-dir")
    if args.dump_config:
        check_output_file(args.dump_config, "--dump-config")
    if args.resume:
        check_resume(args.resume, work_dir, train_cfg={"max_epochs": recipe.train.epochs},
                     settings={"max_epochs": "train.epochs"})
    plain = recipe_to_mmengine_config(recipe, work_dir, tokenizer=args.tokenizer, launcher=args.launcher)
    return _Plan(Config(plain), work_dir, check_inputs=lambda: check_run_inputs(recipe, plain),
                 banner=lambda inputs: (f"training {recipe.name} on {inputs.samples} samples"
                                        f"{_hard_negative_note(recipe, inputs)} for {recipe.train.epochs} "
                                        f"epoch(s) in {work_dir}"),
                 test=bool(recipe.eval), report_checkpoint=True)


def _hard_negative_note(recipe: Any, inputs: Any) -> str:
    spec = recipe.data.hard_negatives
    if spec is None:
        return ""
    return (f" ({inputs.with_hard_negatives} with mined hard negatives, up to {spec.per_anchor} batched with "
            "each anchor)")


def cmd_train(args: argparse.Namespace) -> int:
    """``vlr train RECIPE``: plan the run (a vlr recipe or a native MMEngine config), then
    resume / dump / check the launcher and inputs / run, the same way for every recipe.

    A recipe that is not there and a malformed ``--set`` item are refused before MMEngine (and
    torch) load."""
    from vlr_plugins.recipe import find_recipe

    path = find_recipe(args.recipe)
    _refuse_other_command(args.recipe, path)
    parse_set_items(args.set or [])

    from vlr_plugins.integrations.mmengine.console import build_runner, third_party_warnings
    from vlr_plugins.integrations.mmengine.native import is_native_config
    from vlr_plugins.integrations.mmengine.preflight import check_launcher, nothing_left_on_failure

    with third_party_warnings(args.verbose):
        plan = _native_plan(args, str(path)) if is_native_config(path) else _recipe_plan(args)
        if args.resume:
            plan.cfg.resume = True
            plan.cfg.load_from = None if args.resume == "auto" else args.resume
        if args.dump_config:
            plan.cfg.dump(args.dump_config)
            print(f"wrote {args.dump_config}")
            return 0
        check_launcher(args.launcher)
        inputs = plan.check_inputs()
        with nothing_left_on_failure(plan.work_dir):
            runner = build_runner(plan.cfg, verbose=args.verbose)  # Runner, or the recipe's FlexibleRunner
            main_process = runner.rank == 0  # under torchrun every rank runs this; rank 0 speaks
            if main_process:
                print(f"{plan.banner(inputs)}; full log: {os.path.join(runner.log_dir, runner.timestamp + '.log')}",
                      flush=True)
            runner.train()
            if plan.test:
                runner.test()
    last = os.path.join(plan.work_dir, "last_checkpoint")
    if plan.report_checkpoint and main_process and os.path.isfile(last):
        with open(last, encoding="utf-8") as f:
            print(f"checkpoint: {f.read().strip()}")
    return 0


def add_cli(sub: Any) -> None:
    """Add ``vlr train`` to the ``vlr`` command's subparsers (MMEngine is imported when it runs)."""
    s = sub.add_parser("train", help="train a recipe with MMEngine's Runner")
    s.add_argument("recipe", help="a recipe YAML, or a shipped recipe name such as paragraph/c5")
    s.add_argument("--train", help="training samples (JSON Lines or Parquet); overrides data.train")
    s.add_argument("--image-embeddings", help="embedding store folder; overrides data.image_embeddings")
    s.add_argument("--tokenizer", help="tokenizer folder or Hub name (default: the model's)")
    s.add_argument("--work-dir", help="default: work_dirs/<recipe name>")
    s.add_argument("--resume", nargs="?", const="auto",
                   help="resume from the latest checkpoint in the work dir, or from the given one")
    s.add_argument("--launcher", default="none", choices=["none", "pytorch", "slurm", "mpi"])
    s.add_argument("--set", nargs="*", action="extend", metavar="KEY=VALUE",
                   help="recipe overrides, e.g. train.epochs=2 (several --set add up; a later value wins)")
    s.add_argument("--dump-config", metavar="PATH", help="write the MMEngine config and exit")
    s.add_argument("--verbose", action="store_true",
                   help="show MMEngine's whole console log (environment, config, hooks) and third-party "
                        "deprecation warnings; by default they go to the run's log file only")
    s.set_defaults(fn=cmd_train)
