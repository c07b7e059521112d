"""``vlr lavis-train`` / ``lavis-eval`` / ``lavis-export``: LAVIS' runner on the vlr recipes.

This module lives beside the LAVIS package, not in it: ``integrations/lavis/__init__.py``
imports LAVIS (its own environment, docs/lavis.md), and the commands' ``--help`` must work
without it.
"""

from __future__ import annotations

import argparse
from typing import Any

from vlr_plugins.errors import UserError

__all__ = ["add_cli"]


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


def add_cli(sub: Any) -> None:
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
    s.add_argument("--image-embeddings",
                   help="the image-embedding store it trained against, recorded so that `vlr export` bundles the "
                        "image side that store was made with (default: the run config's)")
    s.add_argument("--options", nargs="+", default=[], metavar="KEY=VALUE", help="LAVIS config overrides")
    s.set_defaults(fn=cmd_lavis_export)
