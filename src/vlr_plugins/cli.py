"""The ``vlr`` command: list, train, openclip-train, lavis-train/-eval/-export, precompute, eval, export, push, demo.

Every command exits with status 2 and a one-line ``error:`` message naming the file,
record and field when its input is bad (a :class:`~vlr_plugins.errors.UserError`;
``VLR_DEBUG=1`` shows the traceback instead); any other exception is a bug and shows its
traceback. Nothing a command writes is left half-written.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

import yaml

from vlr_plugins.errors import UsageError, UserError, as_user_error, run_cli

__all__ = ["main"]


def _parse_set(items: Sequence[str]) -> dict[str, Any]:
    """``["train.epochs=2", "data.train=x.jsonl"]`` -> nested dict (values parsed as YAML).

    A later item wins over an earlier one for the same key; an item may not reach inside a
    key that an earlier one set to a plain value (``a=1 a.b=2``).
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError("--set", f"expected KEY=VALUE such as train.epochs=2, found {item!r}")
        parts = key.split(".")
        if not all(p and p.strip() == p and " " not in p for p in parts):
            raise UsageError("--set", f"{item!r}: expected a dotted key such as train.epochs, found {key!r}")
        node = out
        for depth, p in enumerate(parts[:-1]):
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                earlier = ".".join(parts[: depth + 1])
                raise UsageError("--set", f"{item!r} sets a key inside {earlier}, which an earlier item set to "
                                          f"{node!r}; give one or the other")
        try:
            node[parts[-1]] = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            # the message of a MarkedYAMLError spans lines (it quotes the input); keep its gist
            problem = getattr(e, "problem", None) or " ".join(str(e).split())
            raise UsageError("--set", f"{item!r}: the value is not valid YAML: {problem}") from None
    return out


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
                    if name.startswith("lavis/"):  # LAVIS run configs (vlr lavis-train), not recipes
                        with open(path, encoding="utf-8") as f:
                            desc = "[LAVIS] " + yaml.safe_load(f)["vlr"]["description"]
                    else:
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

    from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config
    from vlr_plugins.integrations.mmengine.console import build_runner, third_party_warnings
    from vlr_plugins.integrations.mmengine.preflight import (
        check_launcher,
        check_output_file,
        check_output_folder,
        check_resume,
        check_run_inputs,
        nothing_left_on_failure,
    )
    from vlr_plugins.recipe import Overrides, load_recipe

    # each value is blamed on where it was given: the file, --set, --train, --image-embeddings
    layers = [Overrides(_parse_set(args.set or []), "--set")]
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
        check_resume(args.resume, work_dir)
    with third_party_warnings(args.verbose):
        plain = recipe_to_mmengine_config(recipe, work_dir, tokenizer=args.tokenizer, launcher=args.launcher)
        cfg = Config(plain)
        if args.resume:
            cfg.resume = True
            cfg.load_from = None if args.resume == "auto" else args.resume
        if args.dump_config:
            cfg.dump(args.dump_config)
            print(f"wrote {args.dump_config}")
            return 0
        check_launcher(args.launcher)
        inputs = check_run_inputs(recipe, plain)
        with nothing_left_on_failure(work_dir):
            runner = build_runner(cfg, verbose=args.verbose)
            print(f"training {recipe.name} on {inputs.samples} samples for {recipe.train.epochs} epoch(s) in "
                  f"{work_dir}; full log: {os.path.join(runner.log_dir, runner.timestamp + '.log')}", flush=True)
            runner.train()
            if recipe.eval:
                runner.test()
    last = os.path.join(work_dir, "last_checkpoint")
    if os.path.isfile(last):
        with open(last, encoding="utf-8") as f:
            print(f"checkpoint: {f.read().strip()}")
    return 0


def cmd_precompute(args: argparse.Namespace) -> int:
    import torch

    from vlr_plugins.data.precompute import list_images, load_encoder, precompute_image_embeddings

    options = {"device": args.device} if args.encoder.startswith("blip:") else {}
    with as_user_error(ValueError):  # a malformed --encoder spec
        encoder = load_encoder(args.encoder, **options)
    with as_user_error(FileNotFoundError, ValueError):  # no such folder or list; listed images missing
        images = list_images(args.images)
    dtype = {"float32": torch.float32, "float16": torch.float16}[args.dtype]
    # --out exists (FileExistsError); --batch-size < 1, or the encoder's output has the wrong shape
    with as_user_error(FileExistsError, ValueError):
        store = precompute_image_embeddings(encoder, images, args.out, batch_size=args.batch_size,
                                            dtype=dtype, meta={"encoder": args.encoder},
                                            overwrite=args.overwrite)
    print(f"wrote {len(store)} embeddings of dim {store.dim} to {args.out}")
    return 0


def _pairs(items: Sequence[str] | None, option: str) -> dict[str, int]:
    """``["short=20"]`` -> ``{"short": 20}``."""
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not value.isdigit():
            raise UsageError(option, f"expected NAME=INTEGER, found {item!r}")
        out[name] = int(value)
    return out


def _integers(text: str | None, option: str) -> list[int] | None:
    """``"20,40,77"`` -> ``[20, 40, 77]``."""
    if not text:
        return None
    try:
        return [int(b) for b in text.split(",")]
    except ValueError:
        raise UsageError(option, f"expected integers such as 20,40,77, found {text!r}") from None


def cmd_eval(args: argparse.Namespace) -> int:
    import torch

    from vlr_plugins.eval import evaluate_benchmarks, load_benchmark_specs, token_budgets
    from vlr_plugins.eval.report_files import write_eval_report
    from vlr_plugins.text import load_text_encoder

    protocol = None if args.protocol in (None, "none") else args.protocol
    with as_user_error(KeyError, ValueError):  # an unknown --protocol; a --budget below 3
        budgets = token_budgets(protocol, _pairs(args.budget, "--budget"))
    truncation = _integers(args.truncation, "--truncation")
    with as_user_error(FileNotFoundError):
        specs = load_benchmark_specs(args.benchmarks)
    with as_user_error(FileNotFoundError, ValueError):  # no checkpoint, or not one of `vlr train`
        encoder = load_text_encoder(args.model).to(args.device)
    tokenizer_path = args.tokenizer or getattr(encoder, "tokenizer_path", None)
    if not tokenizer_path:
        raise UsageError("--tokenizer", f"{args.model} names no tokenizer; pass one")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    label = args.label or os.path.splitext(os.path.basename(str(args.model).rstrip("/")))[0]
    # a benchmark without a budget (KeyError), a --truncation budget the encoder cannot take
    # (ValueError), a benchmark file or store that is not there
    with torch.inference_mode(), as_user_error(KeyError, ValueError, FileNotFoundError):
        result = evaluate_benchmarks(encoder, tokenizer, specs, budgets=budgets, truncation=truncation,
                                     batch_size=args.batch_size, device=args.device)
    report = write_eval_report(result, args.out, model=str(args.model), label=label, protocol=protocol)
    if report["plots"] is None:
        print("matplotlib is not installed (the [plot] extra): no plots written", file=sys.stderr)
    print(report["table"])
    print(f"results: {report['json']}, {report['markdown']}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from vlr_plugins.checkpoint_meta import read_checkpoint_meta
    from vlr_plugins.hf import export_text_encoder
    from vlr_plugins.hf.card import card_files

    meta = read_checkpoint_meta(args.checkpoint)
    name = args.name or os.path.basename(os.path.normpath(args.out))
    extra = card_files(meta, model_name=name, repo_id=args.repo_id, eval_paths=args.eval,
                       license=args.license)
    if "README.md" not in extra:
        print("no recipe recorded with this model: no model card written", file=sys.stderr)
    # the folder exists (FileExistsError); the checkpoint cannot be rebuilt or its tokenizer
    # does not fit it (ValueError)
    with as_user_error(FileExistsError, ValueError):
        out = export_text_encoder(args.checkpoint, args.out, tokenizer=args.tokenizer,
                                  recipe=meta.get("vlr_recipe"), remote_code=not args.no_remote_code,
                                  overwrite=args.overwrite, extra_files=extra)
    print(f"exported to {out}" + (" (with model card)" if "README.md" in extra else ""))
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    from vlr_plugins.hf.push import cmd_push as push

    return push(args)


def cmd_demo(args: argparse.Namespace) -> int:
    from vlr_plugins.demo import DemoConfig, run_demo
    from vlr_plugins.integrations.mmengine.preflight import check_output_folder
    from vlr_plugins.recipe import RecipeError, load_recipe
    from vlr_plugins.registry import MODELS

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
    report = run_demo(cfg)
    print(report["table"])
    print(f"report: {args.out}/report.md, {args.out}/report.json" + (f", {report['plot']}" if report["plot"] else ""))
    return 0


def _at_least(low: int):
    """An argparse type: an integer >= ``low``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, found {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, found {value}")
        return value

    return parse


def _lavis_launcher():
    try:
        from vlr_plugins.integrations.lavis import launcher
    except ImportError as e:
        if "lavis" not in str(e):
            raise
        raise UserError(f"{e}") from None
    return launcher


def cmd_lavis_train(args: argparse.Namespace) -> int:
    return _lavis_launcher().run(args, evaluate=False)


def cmd_lavis_eval(args: argparse.Namespace) -> int:
    return _lavis_launcher().run(args, evaluate=True)


def cmd_lavis_export(args: argparse.Namespace) -> int:
    return _lavis_launcher().export(args)


def _add_lavis(sub) -> None:
    """``vlr lavis-train`` / ``lavis-eval`` / ``lavis-export``; the arguments are parsed here
    so that ``--help`` works without LAVIS (it lives in its own environment)."""
    for name, fn, doc in (
        ("lavis-train", cmd_lavis_train, "train a LAVIS run config (recipes/lavis) with LAVIS' runner"),
        ("lavis-eval", cmd_lavis_eval, "evaluate a LAVIS checkpoint with LAVIS' runner and vlr_retrieval"),
    ):
        s = sub.add_parser(name, help=doc, description=doc + ". Needs the LAVIS environment (docs/lavis.md) "
                           "and CUDA.")
        s.add_argument("--cfg-path", required=True,
                       help="a LAVIS run config, or a shipped one such as lavis/c5 (vlr list recipes)")
        s.add_argument("--options", nargs="+", default=[], metavar="KEY=VALUE",
                       help="LAVIS config overrides, e.g. run.max_epoch=2 run.batch_size_train=64")
        s.add_argument("--train", help="training samples (datasets.vlr_paragraph...annotations.train.storage)")
        s.add_argument("--image-embeddings",
                       help="their image-embedding store (datasets.vlr_paragraph.build_info.image_embeddings.storage)")
        s.add_argument("--output-dir", help="default: run.output_dir, from the working directory")
        s.add_argument("--checkpoint",
                       help="trained weights (LAVIS checkpoint_*.pth) loaded over the base model "
                            "(model.trained_checkpoint); without it the base model is scored")
        s.set_defaults(fn=fn)
    s = sub.add_parser("lavis-export", help="turn a LAVIS checkpoint of blip_retrieval_textonly into a "
                                            "text-encoder checkpoint for `vlr export` (LAVIS environment, CPU)")
    s.add_argument("--cfg-path", required=True, help="the run config it was trained with (e.g. lavis/c5)")
    s.add_argument("--checkpoint", required=True, help="LAVIS checkpoint_*.pth (loaded over the base model)")
    s.add_argument("--out", required=True, help="output .pth; its tokenizer goes to <stem>-tokenizer/")
    s.add_argument("--options", nargs="+", default=[], metavar="KEY=VALUE", help="LAVIS config overrides")
    s.set_defaults(fn=cmd_lavis_export)


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
    s.add_argument("--verbose", action="store_true",
                   help="show MMEngine's whole console log (environment, config, hooks) and third-party "
                        "deprecation warnings; by default they go to the run's log file only")
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

    s = sub.add_parser("eval", help="recall@1/5/10 of a text encoder on benchmarks (streaming, exact)")
    s.add_argument("--model", required=True, help="a `vlr train` checkpoint (.pth) or blip:<hub name or folder>")
    s.add_argument("--benchmarks", required=True, help="YAML: benchmarks: [{name, reader, path, item_embeddings, ...}]")
    s.add_argument("--protocol", default="paragraph-supervision/table2",
                   help="token budgets per benchmark (eval/protocols.yaml); 'none' for only --budget")
    s.add_argument("--budget", nargs="*", metavar="NAME=N", help="override a benchmark's token budget")
    s.add_argument("--truncation", metavar="20,40,...", help="also sweep these encoding budgets and plot them")
    s.add_argument("--tokenizer", help="default: the encoder's")
    s.add_argument("--label", help="name of this model in the report (default: file name)")
    s.add_argument("--out", default="vlr-eval")
    s.add_argument("--batch-size", type=int, default=256)
    s.add_argument("--device", default="cpu")
    s.set_defaults(fn=cmd_eval)

    s = sub.add_parser("export", help="a trained checkpoint -> a Hub-ready transformers folder with a model card")
    s.add_argument("checkpoint", help="a `vlr train` checkpoint (.pth) or blip:<hub name or folder>")
    s.add_argument("out", help="the folder to write (config.json, model.safetensors, code, tokenizer, README.md)")
    s.add_argument("--eval", nargs="*", metavar="RESULTS_JSON", help="`vlr eval` results to put in the card")
    s.add_argument("--name", help="model name in the card (default: the folder name)")
    s.add_argument("--repo-id", help="Hub id used in the card's usage example")
    s.add_argument("--license", help="license id for the card metadata")
    s.add_argument("--tokenizer", help="default: the encoder's")
    s.add_argument("--no-remote-code", action="store_true",
                   help="do not ship modeling code (loading then needs `import vlr_plugins.hf`)")
    s.add_argument("--overwrite", action="store_true")
    s.set_defaults(fn=cmd_export)

    from vlr_plugins.integrations.open_clip.cli import add_cli as add_openclip_train

    add_openclip_train(sub)
    _add_lavis(sub)

    # no --token: a token on the command line lands in shell history and `ps`
    s = sub.add_parser("push", help="upload an exported folder to the Hugging Face Hub (private by default)",
                       description="Upload an exported folder to a Hub model repository. The token comes "
                                   "from HF_TOKEN or `hf auth login`.")
    s.add_argument("folder", help="a folder written by `vlr export` (config.json + *.safetensors)")
    s.add_argument("repo_id", help="namespace/name; created if missing")
    s.add_argument("--public", action="store_true", help="create the repository public (default: private)")
    s.add_argument("--message", "-m", help="commit message (default names the recipe and vlr-plugins version)")
    s.add_argument("--revision", help="branch to commit to (default: main)")
    s.add_argument("--endpoint", help="Hub URL (default: HF_ENDPOINT or https://huggingface.co)")
    s.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing")
    s.set_defaults(fn=cmd_push)

    s = sub.add_parser("demo", help="run C1/C5/C7 on a synthetic world, offline, on a CPU")
    s.add_argument("--out", default="vlr-demo")
    s.add_argument("--recipes", nargs="*", help="shipped recipe names (default: paragraph/c1 c5 c7)")
    s.add_argument("--epochs", type=_at_least(1))
    s.add_argument("--seed", type=_at_least(0), default=0)
    s.add_argument("--quick", action="store_true", help="a tiny run (seconds), for smoke tests")
    s.set_defaults(fn=cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``vlr`` with ``argv`` (default: the process's); returns the exit status (see
    :func:`vlr_plugins.errors.run_cli`: 2 for a :class:`~vlr_plugins.errors.UserError`)."""
    args = build_parser().parse_args(argv)
    return run_cli(lambda: args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
