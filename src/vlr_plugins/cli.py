"""The ``vlr`` command: list, train, openclip-train, lavis-train/-eval/-export, mteb, precompute, eval, mine, calibrate,
export, push, demo, capst, caption, lens, generate.

Every command exits with status 2 and a one-line ``error:`` message naming the file,
record and field when its input is bad (a :class:`~vlr_plugins.errors.UserError`;
``VLR_DEBUG=1`` shows the traceback instead); any other exception is a bug and shows its
traceback. Nothing a command writes is left half-written.

This module only dispatches: each verb is defined in its area (:data:`_AREAS`, in the
order ``vlr --help`` lists them) by an ``add_cli(subparsers)`` that imports its ecosystem
only when the command runs (for the areas whose package imports its ecosystem, the command
module lives beside the package: ``hf_cli.py``, ``integrations/mmengine_cli.py``,
``integrations/lavis_cli.py``, ``integrations/mteb_cli.py``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from vlr_plugins.errors import run_cli

__all__ = ["main"]

#: ``module:function`` adding the verbs after ``vlr list`` to the subparsers, in ``vlr --help`` order
_AREAS = (
    "vlr_plugins.integrations.mmengine_cli:add_cli",  # train
    "vlr_plugins.precompute.cli:add_cli",  # precompute
    "vlr_plugins.eval.cli:add_cli",  # eval
    "vlr_plugins.mine.cli:add_cli",  # mine
    "vlr_plugins.eval.cli_calibrate:add_cli",  # calibrate
    "vlr_plugins.hf_cli:add_export_cli",  # export
    "vlr_plugins.integrations.open_clip.cli:add_cli",  # openclip-train
    "vlr_plugins.integrations.lavis_cli:add_cli",  # lavis-train, lavis-eval, lavis-export
    "vlr_plugins.integrations.mteb_cli:add_cli",  # mteb
    "vlr_plugins.hf_cli:add_push_cli",  # push
    "vlr_plugins.demo.cli:add_cli",  # demo
    "vlr_plugins.eval.capst.cli:add_cli",  # capst
    "vlr_plugins.mllm.caption_cli:add_cli",  # caption
    "vlr_plugins.mllm.lens_cli:add_cli",  # lens
    "vlr_plugins.generate.cli:add_cli",  # generate
)

def cmd_list(args: argparse.Namespace) -> int:
    from vlr_plugins._io import read_yaml
    from vlr_plugins.recipe import list_recipes
    from vlr_plugins.recipe.loading import recipe_description
    from vlr_plugins.registry import all_registries

    if getattr(args, "name", None):
        return _show_entry(args.kind, args.name)
    kinds = [args.kind] if args.kind else ["losses", "models", "readers", "metrics", "recipes"]
    for kind in kinds:
        print(f"{kind}:")
        if kind == "recipes":
            for name, path in list_recipes().items():
                try:
                    native = (read_yaml(path) or {}).get("vlr")
                    if isinstance(native, dict):  # a trainer's own config (LAVIS run config, CaRe's MMEngine config)
                        label = native.get("kind") or name.split("/")[0]
                        desc = f"[{'LAVIS' if label == 'lavis' else label}] {native['description']}"
                    else:
                        desc = recipe_description(path)
                except Exception as e:  # a broken shipped recipe is shown, not hidden
                    desc = f"(invalid: {e})"
                print(f"  {name:<28} {desc}")
        else:
            for e in all_registries()[kind].summaries(args.pattern):
                print(f"  {e.name:<28} {e.description}")
    return 0


def _show_entry(kind: str, name: str) -> int:
    """``vlr list KIND NAME``: one entry whole — its call signature (what a config's or a
    benchmark's ``args`` take) and its documentation (a reader's file layout, a loss's math); a
    recipe's file."""
    import difflib
    import inspect

    from vlr_plugins.errors import UsageError
    from vlr_plugins.registry import all_registries

    if kind == "recipes":
        from vlr_plugins.recipe import find_recipe

        path = find_recipe(name)
        print(f"# {path}\n")
        print(path.read_text(encoding="utf-8"), end="")
        return 0
    registry = all_registries()[kind]
    names = registry.names()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3)
        raise UsageError("name", f"no {kind[:-1] if kind != 'losses' else 'loss'} {name!r}"
                                 + (f"; did you mean {', '.join(close)}?" if close else "")
                                 + f" (`vlr list {kind}` shows them)")
    (entry,) = [e for e in registry.entries(name) if e.name == name]
    try:
        signature = str(inspect.signature(entry.obj))
    except (TypeError, ValueError):
        signature = "(...)"
    print(f"{entry.name}{signature}    [{entry.module}]\n")
    print(inspect.getdoc(entry.obj) or entry.description)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from vlr_plugins import __version__

    p = argparse.ArgumentParser(
        prog="vlr", description="Vision-language retrieval recipes for LAVIS, OpenCLIP and MMEngine: train, "
        "evaluate, mine, export and share.", epilog="`vlr COMMAND --help` shows a command's options. A bad input "
        "exits with status 2 and one `error:` line (VLR_DEBUG=1 shows the traceback).")
    p.add_argument("--version", action="version", version=f"vlr-plugins {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("list", help="show registered losses, models, readers, metrics and shipped recipes")
    s.add_argument("kind", nargs="?", choices=["losses", "models", "readers", "metrics", "recipes"])
    s.add_argument("name", nargs="?", help="one entry of KIND, shown whole: its arguments and documentation "
                                           "(e.g. `vlr list readers msrvtt`: the files it reads, their layout)")
    s.add_argument("--pattern", default="*", help="fnmatch pattern on names")
    s.set_defaults(fn=cmd_list)
    for area in _AREAS:
        module, _, function = area.partition(":")
        getattr(importlib.import_module(module), function)(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``vlr`` with ``argv`` (default: the process's); returns the exit status (see
    :func:`vlr_plugins.errors.run_cli`: 2 for a :class:`~vlr_plugins.errors.UserError`)."""
    args = build_parser().parse_args(argv)
    return run_cli(lambda: args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
