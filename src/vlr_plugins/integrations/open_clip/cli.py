"""``vlr openclip-train``: the subcommand, importable without open_clip."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_cli"]


def _run(args: argparse.Namespace) -> int:
    from vlr_plugins.integrations.open_clip.train import main

    return main(args.argv)


def add_cli(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``vlr openclip-train`` to the ``vlr`` command's subparsers.

    Every argument after the subcommand goes as given to
    :func:`vlr_plugins.integrations.open_clip.train.main` (open_clip is imported only
    when the command runs), so ``cli.main`` runs ``args.fn(args)`` as for the others.
    """
    s = subparsers.add_parser(
        "openclip-train",
        add_help=False,
        prefix_chars="\0",
        help="fine-tune with open_clip's trainer and the vlr losses "
        "(every open_clip_train argument, plus --vlr-*; --help lists ours)",
    )
    s.add_argument("argv", nargs=argparse.REMAINDER)
    s.set_defaults(fn=_run)
    return s
