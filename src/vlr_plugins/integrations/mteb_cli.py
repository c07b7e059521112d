"""``vlr mteb --model EXPORT --tasks T1 T2 ...``: MTEB's tasks on an exported folder.

This module lives beside the package, not in it: ``integrations/mteb`` imports ``mteb``
(the ``mteb`` extra, not in ``all``), and ``vlr --help`` must work without it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from vlr_plugins.errors import UserError

__all__ = ["add_cli"]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found {value}")
    return value


def _package():
    try:
        import mteb  # noqa: F401
    except ImportError as e:
        raise UserError(f"vlr mteb needs MTEB ({e}): pip install 'vlr-plugins[mteb]'") from None
    from vlr_plugins.integrations import mteb as package

    return package


def cmd_mteb(args: argparse.Namespace) -> int:
    from vlr_plugins._io import check_output_dir

    if args.out is not None:
        check_output_dir(args.out, "--out")
    package = _package()
    from vlr_plugins.integrations.mteb.run import resolve_tasks, run_mteb, summary_markdown

    export = package.read_export_folder(args.model)
    tasks = resolve_tasks(args.tasks)
    summary = run_mteb(export.path, tasks, out=args.out, batch_size=args.batch_size, device=args.device,
                       name=args.name, view=args.view, dtype=args.dtype, frames=args.frames,
                       show_progress_bar=not args.quiet, export=export)
    print(summary_markdown(summary) if args.out is None else
          f"wrote {args.out}/results.json, results.md and MTEB's results under {args.out}/results/")
    if args.out is None and args.json:
        print(json.dumps(summary, indent=2))
    return 0


def add_cli(sub: Any) -> argparse.ArgumentParser:
    """``vlr mteb``; the arguments are parsed here so that ``--help`` works without MTEB."""
    s = sub.add_parser("mteb", help="score an export on MTEB tasks (image / video / text retrieval)",
                       description="Score an exported folder (vlr export: BLIP paragraph model, MVC dual-CLS, EOL "
                                   "embedder, open_clip) on MTEB tasks with mteb.evaluate. Tasks are downloaded "
                                   "from the Hub by MTEB unless cached. Needs the mteb extra.")
    s.add_argument("--model", required=True, metavar="EXPORT", help="a folder written by `vlr export`")
    s.add_argument("--tasks", required=True, nargs="+", metavar="TASK",
                   help="MTEB task names, e.g. MSRVTTT2V CaReBenchT2VRetrieval, or module:Class for a task of your own "
                        "(an mteb AbsTask subclass; the current folder is importable)")
    s.add_argument("--out", metavar="DIR", help="write MTEB's result files, results.json and results.md here "
                                                "(default: print the table, keep nothing)")
    s.add_argument("--batch-size", type=_positive, default=32, help="rows per encode batch (default 32)")
    s.add_argument("--device", help="default: cuda when available, else cpu")
    s.add_argument("--name", help="the model's name in MTEB's results (organization/name; default: the card's "
                                  "Hub id, else vlr-local/<folder name>)")
    s.add_argument("--view", help="caption view whose token budget texts get (and, for MVC, its CLS)")
    s.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], help="an EOL embedder's dtype")
    s.add_argument("--frames", type=_positive, metavar="N",
                   help="score an image-text export on video tasks as the mean of N frames' embeddings")
    s.add_argument("--json", action="store_true", help="without --out, also print the summary as JSON")
    s.add_argument("--quiet", action="store_true", help="no progress bars")
    s.set_defaults(fn=cmd_mteb)
    return s
