"""The ``vlr`` command: list, train, precompute, demo.

Every command exits non-zero with a one-line ``error:`` message naming the file, record
and field when its input is bad; nothing it writes is left half-written.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

import yaml

__all__ = ["main"]


def _parse_set(items: Sequence[str]) -> dict[str, Any]:
    """``["train.epochs=2", "data.train=x.jsonl"]`` -> nested dict (values parsed as YAML)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects KEY=VALUE, found {item!r}")
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = yaml.safe_load(raw)
    return out


def _merge_into(dst: dict[str, Any], src: dict[str, Any]) -> dict[str, Any]:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge_into(dst[k], v)
        else:
            dst[k] = v
    return dst


# --------------------------------------------------------------------------- commands


def cmd_list(args: argparse.Namespace) -> int:
    from vlr_plugins.recipe import list_recipes, load_recipe
    from vlr_plugins.registry import all_registries

    kinds = [args.kind] if args.kind else ["losses", "models", "readers", "metrics", "recipes"]
    for kind in kinds:
        print(f"{kind}:")
        if kind == "recipes":
            for name, path in list_recipes().items():
                try:
                    desc = load_recipe(path).description
                except Exception as e:  # a broken shipped recipe is shown, not hidden
                    desc = f"(invalid: {e})"
                print(f"  {name:<28} {desc}")
        else:
            for e in all_registries()[kind].entries(args.pattern):
                print(f"  {e.name:<28} {e.description}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from mmengine.config import Config
    from mmengine.runner import Runner

    from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config
    from vlr_plugins.recipe import load_recipe

    overrides = _parse_set(args.set or [])
    data = {k: v for k, v in (("train", args.train), ("image_embeddings", args.image_embeddings)) if v}
    if data:
        _merge_into(overrides, {"data": data})
    recipe = load_recipe(args.recipe, overrides or None)
    work_dir = args.work_dir or f"work_dirs/{recipe.name}"
    cfg = Config(recipe_to_mmengine_config(recipe, work_dir, tokenizer=args.tokenizer, launcher=args.launcher))
    if args.resume:
        cfg.resume = True
        cfg.load_from = None if args.resume == "auto" else args.resume
    if args.dump_config:
        cfg.dump(args.dump_config)
        print(f"wrote {args.dump_config}")
        return 0
    runner = Runner.from_cfg(cfg)
    runner.train()
    if recipe.eval:
        runner.test()
    return 0


def cmd_precompute(args: argparse.Namespace) -> int:
    import torch

    from vlr_plugins.data.precompute import list_images, load_encoder, precompute_image_embeddings

    encoder = load_encoder(args.encoder, **({"device": args.device} if args.encoder.startswith("blip:") else {}))
    images = list_images(args.images)
    dtype = {"float32": torch.float32, "float16": torch.float16}[args.dtype]
    store = precompute_image_embeddings(encoder, images, args.out, batch_size=args.batch_size, dtype=dtype,
                                        meta={"encoder": args.encoder}, overwrite=args.overwrite)
    print(f"wrote {len(store)} embeddings of dim {store.dim} to {args.out}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from vlr_plugins.demo import DemoConfig, run_demo

    cfg = DemoConfig(out_dir=args.out, seed=args.seed)
    if args.recipes:
        cfg.recipes = tuple(args.recipes)
    if args.quick:
        cfg.num_train, cfg.num_eval, cfg.epochs, cfg.batch_size = 128, 32, 1, 32
        cfg.encoder = dict(cfg.encoder, hidden_size=64, num_hidden_layers=1, intermediate_size=128)
    if args.epochs:
        cfg.epochs = args.epochs
    report = run_demo(cfg)
    print(report["table"])
    print(f"report: {args.out}/report.md, {args.out}/report.json" + (f", {report['plot']}" if report["plot"] else ""))
    return 0


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    from vlr_plugins import __version__

    p = argparse.ArgumentParser(prog="vlr", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"vlr-plugins {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("list", help="show registered losses, models, readers, metrics and shipped recipes")
    s.add_argument("kind", nargs="?", choices=["losses", "models", "readers", "metrics", "recipes"])
    s.add_argument("--pattern", default="*", help="fnmatch pattern on names")
    s.set_defaults(fn=cmd_list)

    s = sub.add_parser("train", help="train a recipe with MMEngine's Runner")
    s.add_argument("recipe", help="a recipe YAML, or a shipped recipe name such as paragraph/c5")
    s.add_argument("--train", help="training samples (JSON Lines or Parquet); overrides data.train")
    s.add_argument("--image-embeddings", help="embedding store folder; overrides data.image_embeddings")
    s.add_argument("--tokenizer", help="tokenizer folder or Hub name (default: the model's)")
    s.add_argument("--work-dir", help="default: work_dirs/<recipe name>")
    s.add_argument("--resume", nargs="?", const="auto",
                   help="resume from the latest checkpoint in the work dir, or from the given one")
    s.add_argument("--launcher", default="none", choices=["none", "pytorch", "slurm", "mpi"])
    s.add_argument("--set", nargs="*", metavar="KEY=VALUE", help="recipe overrides, e.g. train.epochs=2")
    s.add_argument("--dump-config", metavar="PATH", help="write the MMEngine config and exit")
    s.set_defaults(fn=cmd_train)

    s = sub.add_parser("precompute", help="embed images once with a frozen vision tower into a store")
    s.add_argument("--images", required=True, help="a folder, or a .txt / .jsonl list of images")
    s.add_argument("--encoder", required=True,
                   help="blip:<hub name or folder> (BlipForImageTextRetrieval) or module:callable")
    s.add_argument("--out", required=True, help="the store folder to write")
    s.add_argument("--batch-size", type=int, default=64)
    s.add_argument("--device", default="cpu")
    s.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    s.add_argument("--overwrite", action="store_true")
    s.set_defaults(fn=cmd_precompute)

    s = sub.add_parser("demo", help="run C1/C5/C7 on a synthetic world, offline, on a CPU")
    s.add_argument("--out", default="vlr-demo")
    s.add_argument("--recipes", nargs="*", help="shipped recipe names (default: paragraph/c1 c5 c7)")
    s.add_argument("--epochs", type=int)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--quick", action="store_true", help="a tiny run (seconds), for smoke tests")
    s.set_defaults(fn=cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from vlr_plugins.data.errors import DataFormatError, MissingEmbeddingsError
    from vlr_plugins.recipe import RecipeError

    try:
        return args.fn(args)
    except (RecipeError, DataFormatError, MissingEmbeddingsError, FileNotFoundError, FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `vlr list | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
