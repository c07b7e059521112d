"""``vlr demo``: the paragraph demo (C1 / C5 / C7) or ``vlr demo mvc`` (Baseline-B and MVC-B),
on synthetic worlds, offline, on a CPU."""

from __future__ import annotations

import argparse
from typing import Any

from vlr_plugins._argtypes import at_least
from vlr_plugins.errors import UsageError

__all__ = ["add_cli", "cmd_demo"]


def _demo_mvc(args: argparse.Namespace) -> int:
    """``vlr demo mvc``: Baseline-B and MVC-B on the synthetic video world (demo/mvc.py)."""
    from vlr_plugins.demo.mvc import MVCDemoConfig, run_mvc_demo, write_mvc_demo_world
    from vlr_plugins.integrations.mmengine.preflight import check_output_folder

    if args.recipes:
        raise UsageError("--recipes", "vlr demo mvc trains mvc/baseline_b and mvc/mvc_b; --recipes picks "
                                      "paragraph recipes for the paragraph demo (vlr demo)")
    out = args.out or "vlr-demo-mvc"
    check_output_folder(out, "--out")
    cfg = MVCDemoConfig(out_dir=out, seed=args.seed)
    if args.quick:
        cfg.num_train, cfg.num_eval, cfg.epochs, cfg.batch_size, cfg.width, cfg.depth = 32, 8, 1, 8, 32, 1
    if args.world_only:
        if args.epochs:
            raise UsageError("--epochs", "--world-only trains nothing; leave out --epochs")
        paths = write_mvc_demo_world(cfg)
        print(f"wrote {cfg.num_train} training and {cfg.num_eval} held-out clips: corpus {paths['train']}, "
              f"tokenizer {paths['tokenizer']}, held-out clips {paths['eval_videos']} (a vlr precompute --videos "
              f"list), queries {paths['eval_summary']}, {paths['eval_detailed']}")
        return 0
    if args.epochs:
        cfg.epochs = args.epochs
    report = run_mvc_demo(cfg)
    print(report["table"])
    print(f"report: {out}/report.md, {out}/report.json" + (f", {report['plot']}" if report["plot"] else ""))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    if args.which == "mvc":
        return _demo_mvc(args)
    if args.world_only:
        raise UsageError("--world-only", "writes vlr demo mvc's video world (vlr demo mvc --world-only); the "
                                         "paragraph demo's world is vlr_plugins.demo.SyntheticWorld(...).write(FOLDER)")
    from vlr_plugins.demo.paragraph import DemoConfig, run_demo
    from vlr_plugins.integrations.mmengine.preflight import check_output_folder
    from vlr_plugins.recipe import RecipeError, load_recipe
    from vlr_plugins.registry import MODELS

    args.out = args.out or "vlr-demo"
    check_output_folder(args.out, "--out")
    cfg = DemoConfig(out_dir=args.out, seed=args.seed)
    if args.recipes:
        for name in args.recipes:  # the demo swaps in its tiny model: the recipe must train a text encoder
            try:
                model = load_recipe(name).model["type"]
            except RecipeError as e:
                raise UsageError("--recipes", str(e)) from None
            if model not in MODELS:
                raise UsageError("--recipes", f"{name} trains {model!r}, not a text encoder the demo can shrink "
                                              f"({', '.join(MODELS.names())}): use paragraph/* recipes")
        cfg.recipes = tuple(args.recipes)
    if args.quick:
        cfg.num_train, cfg.num_eval, cfg.epochs, cfg.batch_size = 128, 32, 1, 32
        cfg.encoder = dict(cfg.encoder, hidden_size=64, num_hidden_layers=1, intermediate_size=128)
    if args.epochs:
        cfg.epochs = args.epochs
    report = run_demo(cfg, verbose=args.verbose)
    print(report["table"])
    plots = "".join(f", {report[k]}" for k in ("plot", "truncation_plot") if report[k])
    print(f"report: {args.out}/report.md, {args.out}/report.json{plots}")
    return 0


def add_cli(sub: Any) -> None:
    """Add ``vlr demo`` to the ``vlr`` command's subparsers."""
    s = sub.add_parser("demo", help="run C1/C5/C7 on a synthetic world (vlr demo mvc: Baseline-B and MVC-B on "
                                    "synthetic videos), offline, on a CPU")
    s.add_argument("which", nargs="?", choices=["mvc"],
                   help="mvc: multi-view-captions pretraining on a synthetic video world (default: paragraph demo)")
    s.add_argument("--out", help="output folder (default vlr-demo, or vlr-demo-mvc)")
    s.add_argument("--recipes", nargs="*", help="shipped recipe names (default: paragraph/c1 c5 c7)")
    s.add_argument("--epochs", type=at_least(1))
    s.add_argument("--seed", type=at_least(0), default=0)
    s.add_argument("--quick", action="store_true", help="a tiny run (seconds), for smoke tests")
    s.add_argument("--world-only", action="store_true",
                   help="vlr demo mvc: write the synthetic video world (clips, MVC corpus, held-out clips and "
                        "queries, tokenizer) under OUT/world and stop, nothing trained")
    s.add_argument("--verbose", action="store_true",
                   help="show MMEngine's whole console output and every deprecation warning")
    s.set_defaults(fn=cmd_demo)
