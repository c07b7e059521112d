"""``vlr openclip-train`` / ``python -m vlr_plugins.integrations.open_clip.train``.

Every argument of ``python -m open_clip_train.main`` plus ours (``--vlr-*``). Ours are
parsed off first; a recipe (``--vlr-recipe``) supplies defaults for open_clip's
options that the command line does not set; the rest goes to
``open_clip_train.main.main`` unchanged, which runs inside
:func:`~vlr_plugins.integrations.open_clip.patch.patched_open_clip_train`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import yaml

from vlr_plugins.errors import UsageError, UserError, as_user_error, run_cli
from vlr_plugins.integrations.open_clip.long_context import parse_long_context_name
from vlr_plugins.integrations.open_clip.options import TEMPERATURE_SOURCES, VLRTrainOptions
from vlr_plugins.recipe import (
    Recipe,
    RecipeError,
    TextViews,
    build_text_views,
    check_loss_against_views,
    load_recipe,
)

__all__ = ["build_parser", "main", "resolve_arguments"]

_MODEL_KEYS = {
    "type",
    "name",
    "pretrained",
    "context_length",
    "keep_positions",
    "lock_image",
    "open_clip_args",
}


def build_parser() -> argparse.ArgumentParser:
    """The ``--vlr-*`` options (open_clip_train's own are not listed here)."""
    p = argparse.ArgumentParser(
        prog="vlr openclip-train",
        allow_abbrev=False,
        add_help=False,
        description="open_clip_train with the vlr losses, several texts per image and long "
        "text. Every other argument is open_clip_train's (python -m "
        "open_clip_train.main --help).",
    )
    p.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    p.add_argument(
        "--vlr-recipe",
        metavar="NAME_OR_YAML",
        help="a recipe (e.g. open_clip/c5, open_clip/long_clip): text views, loss, model "
        "and hyperparameters; explicit open_clip options win over it",
    )
    p.add_argument(
        "--vlr-loss",
        metavar="NAME",
        help="a registered loss (vlr list losses); default InfoNCELoss, or the recipe's",
    )
    p.add_argument(
        "--vlr-loss-args", metavar="YAML", help="its arguments, e.g. '{variant: log_sum}'"
    )
    p.add_argument(
        "--vlr-text-views",
        metavar="YAML",
        help="texts per image: '{positives: [{field: caption, max_tokens: 77}], negatives: "
        "[...]}' (a list = positives); fields caption, positives, hard_negatives, "
        "paragraph; take all|first|random with count. Default: the caption",
    )
    p.add_argument(
        "--vlr-temperature",
        choices=TEMPERATURE_SOURCES,
        default="model",
        help="model: 1/logit_scale, open_clip's learnable scale (default); loss: the "
        "loss's own fixed temperature",
    )
    p.add_argument(
        "--vlr-short-text",
        metavar="first-sentence|field:NAME",
        help="short captions for losses that take them (PCM); default first-sentence "
        "(Long-CLIP) when the loss needs them",
    )
    p.add_argument(
        "--vlr-image-embeddings",
        metavar="STORE",
        help="precomputed image embeddings keyed by sample id (with --lock-image): the "
        "vision tower does not run; a missing store is computed first from "
        "CSV/JSONL data with the locked tower",
    )
    p.add_argument(
        "--vlr-image-key",
        metavar="KEY",
        help="image path field: default 'image' (JSONL/Parquet), --csv-img-key (CSV)",
    )
    p.add_argument(
        "--vlr-image-root",
        metavar="DIR",
        help="folder of relative image paths (default: the data file's folder)",
    )
    p.add_argument(
        "--vlr-context-length",
        type=int,
        metavar="N",
        help="stretch the text tower to N positions (Long-CLIP); implied by a "
        "'<base>-ctx<N>' --model",
    )
    p.add_argument(
        "--vlr-keep-positions",
        type=int,
        default=None,
        metavar="K",
        help="positions kept unstretched (default 20)",
    )
    p.add_argument(
        "--vlr-train-kept-positions",
        action="store_true",
        help="let the kept positions train too (Long-CLIP freezes them)",
    )
    return p


def _given(argv: Sequence[str], option: str) -> bool:
    return any(a == option or a.startswith(option + "=") for a in argv)


def _yaml(text: str | None, what: str) -> Any:
    if text is None:
        return None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise UsageError(what, f"not valid YAML: {e}") from None


def _views(spec: Any, loss: dict[str, Any]) -> TextViews:
    """Validate a view spec through the recipe loader, so errors read as in recipes."""
    if isinstance(spec, list):
        spec = {"positives": spec}
    if not isinstance(spec, dict):
        raise UsageError("--vlr-text-views", f"expected a mapping or a list of views, found {spec!r}")
    views = build_text_views(spec, "--vlr-text-views", key="text_views")
    check_loss_against_views(loss, views, "--vlr-text-views")
    return views


def _recipe_defaults(recipe: Recipe, argv: Sequence[str]) -> list[str]:
    """open_clip_train options from a recipe, for those ``argv`` does not set."""
    m, t, d = recipe.model, recipe.train, recipe.data
    unknown = set(m) - _MODEL_KEYS
    if unknown:
        raise RecipeError(
            recipe.source,
            f"model.{sorted(unknown)[0]}",
            f"not an open_clip model key (allowed: {', '.join(sorted(_MODEL_KEYS))})",
        )
    if t.length_blocks != 1:
        raise recipe.error(
            "train.length_blocks",
            f"{t.length_blocks}, but vlr openclip-train encodes a batch's texts in one block: open_clip pads "
            "every text to the context length and encode_text needs that width; leave it at 1",
        )
    # the processes as open_clip_train counts them (torchrun's WORLD_SIZE, srun's SLURM_NTASKS, MPI's)
    from open_clip_train.distributed import is_using_distributed, world_info_from_env

    world = world_info_from_env()[2] if is_using_distributed() else 1
    if t.batch_size % world:
        raise RecipeError(
            recipe.source,
            "train.batch_size",
            f"{t.batch_size} does not split evenly over {world} processes",
        )
    pairs: list[tuple[str, Any]] = [
        ("--model", m.get("name")),
        ("--pretrained", m.get("pretrained")),
        ("--train-data", d.train),
        ("--batch-size", t.batch_size // world),
        ("--epochs", t.epochs),
        ("--lr", t.lr),
        ("--wd", t.weight_decay),
        ("--beta1", t.betas[0]),
        ("--beta2", t.betas[1]),
        ("--warmup", t.warmup_steps),
        ("--lr-scheduler", {"cosine": "cosine", "constant": "const"}[t.schedule]),
        ("--grad-clip-norm", t.grad_clip),
        ("--workers", t.num_workers),
        ("--seed", t.seed),
        ("--log-every-n-steps", t.log_interval),
        ("--save-frequency", t.checkpoint_interval),
    ]
    out: list[str] = []
    for option, value in pairs:
        if value is not None and not _given(argv, option):
            out += [option, str(value)]
    flags = [
        ("--precision", ["--precision", "amp"], t.amp),
        ("--lock-image", ["--lock-image"], m.get("lock_image")),
    ]
    for option, args, wanted in flags:
        if wanted and not _given(argv, option):
            out += args
    extra = list(m.get("open_clip_args") or [])
    i = 0
    while i < len(extra):  # pairs or lone flags; each only if the command line lacks it
        option = str(extra[i])
        value = (
            [str(extra[i + 1])]
            if i + 1 < len(extra) and not str(extra[i + 1]).startswith("--")
            else []
        )
        if not _given(argv, option):
            out += [option, *value]
        i += 1 + len(value)
    return out


def resolve_arguments(argv: Sequence[str]) -> tuple[VLRTrainOptions, list[str]]:
    """Split ``argv`` into our options and the arguments for ``open_clip_train.main.main``,
    and refuse combinations the vlr losses cannot serve (a ``UsageError``, which is a
    ``ValueError``, naming the option; a ``RecipeError`` for a bad recipe or views)."""
    from open_clip_train.params import parse_args as parse_open_clip_args

    ours, rest = build_parser().parse_known_args(list(argv))
    recipe = load_recipe(ours.vlr_recipe) if ours.vlr_recipe else None
    if recipe is not None:
        rest = _recipe_defaults(recipe, rest) + rest
    loss = dict(recipe.loss) if recipe is not None else {"type": "InfoNCELoss"}
    if ours.vlr_loss:
        loss = {"type": ours.vlr_loss}
    loss_args = _yaml(ours.vlr_loss_args, "--vlr-loss-args")
    if loss_args is not None:
        if not isinstance(loss_args, dict):
            raise UsageError("--vlr-loss-args", f"expected a mapping, found {loss_args!r}")
        loss.update(loss_args)
    spec = _yaml(ours.vlr_text_views, "--vlr-text-views")
    views = recipe.text_views if recipe is not None else None
    if spec is None and views is not None:
        spec = {
            "positives": [dataclasses.asdict(v) for v in views.positives],
            "negatives": [dataclasses.asdict(v) for v in views.negatives],
        }
    # the views and the loss are checked together, as a recipe's are; without views the
    # caption is the one text, at the model's context length (known once it is built)
    checked = _views(spec if spec is not None else [{"field": "caption", "max_tokens": 77}], loss)
    views = checked if spec is not None else None

    a = parse_open_clip_args(rest)
    if str(a.model).startswith("local-dir:"):
        from vlr_plugins.integrations.open_clip.text_model import check_local_dir

        check_local_dir(a.model, "--model")  # before open_clip_train makes its logs folder
    model_cfg = recipe.model if recipe is not None else {}
    context_length = ours.vlr_context_length or model_cfg.get("context_length")
    long_name = parse_long_context_name(a.model)
    if long_name is not None:
        if context_length not in (None, long_name[1]):
            raise UsageError("--vlr-context-length", f"{context_length} contradicts --model {a.model}")
        context_length = long_name[1]
    if context_length is not None:
        if a.force_context_length not in (None, context_length):
            raise UsageError(
                "--force-context-length",
                f"{a.force_context_length} contradicts the context length {context_length} "
                "of the stretched model",
            )
        # open_clip_train builds its tokenizer (validation, zero-shot) from this option
        rest += ["--force-context-length", str(context_length)]
    keep = (
        ours.vlr_keep_positions
        if ours.vlr_keep_positions is not None
        else model_cfg.get("keep_positions", 20)
    )

    _refuse_unsupported(a, ours)
    options = VLRTrainOptions(
        loss=loss,
        views=views,
        temperature=ours.vlr_temperature,
        short=ours.vlr_short_text,
        image_embeddings=ours.vlr_image_embeddings
        or (recipe.data.image_embeddings if recipe else None),
        image_key=ours.vlr_image_key,
        image_root=ours.vlr_image_root,
        context_length=context_length,
        keep_positions=keep,
        freeze_kept_positions=not ours.vlr_train_kept_positions,
        fraction=recipe.data.fraction if recipe else 1.0,
        data_seed=recipe.data.seed if recipe else 0,
    )
    _check_loss_and_short(options)
    if options.image_embeddings and not a.lock_image:
        raise UsageError(
            "--vlr-image-embeddings",
            "it replaces the vision tower, so that tower must be frozen: add --lock-image",
        )
    return options, rest


def _refuse_unsupported(a: argparse.Namespace, ours: argparse.Namespace) -> None:
    problems = []
    if not a.train_data:
        problems.append(
            "--train-data is required (to only evaluate, run python -m open_clip_train.main)"
        )
    if a.dataset_type == "synthetic":
        problems.append("--dataset-type synthetic has no texts to draw views from")
    if a.accum_freq > 1:
        problems.append(
            "--accum-freq > 1: open_clip_train concatenates cached features across "
            "micro-batches, which loses which image each text belongs to; for a contrastive "
            "batch larger than memory give the loss a cache_chunk (gradient caching), e.g. "
            "--vlr-loss-args '{cache_chunk: 32}'"
        )
    if a.distill_model or a.distill_pretrained:
        problems.append(
            "--distill-model/--distill-pretrained: distillation needs open_clip's DistillClipLoss"
        )
    if a.siglip:
        problems.append("--siglip: the vlr losses are softmax InfoNCE losses")
    if "coca" in a.model.lower():
        problems.append("CoCa models: their captioning loss is not a vlr loss")
    if a.horovod:
        problems.append("--horovod: the vlr losses gather with torch.distributed")
    if a.torchscript or a.trace:
        problems.append("--torchscript/--trace: a traced model cannot take several texts per image")
    if a.local_loss:
        problems.append(
            "--local-loss: the vlr losses always compute the global-batch loss "
            "(gathered with gradient, as --gather-with-grad); drop the flag"
        )
    if a.lock_image and a.lock_image_unlocked_groups and ours.vlr_image_embeddings:
        problems.append(
            "--vlr-image-embeddings with --lock-image-unlocked-groups > 0: part of the "
            "vision tower would train, so its embeddings cannot be precomputed"
        )
    if problems:
        raise UsageError(
            "vlr openclip-train", "cannot run this combination:\n  - " + "\n  - ".join(problems)
        )


def _check_loss_and_short(o: VLRTrainOptions) -> None:
    """Build the loss once now, so a bad name or argument fails before any data is read."""
    from vlr_plugins.integrations.open_clip.loss import build_openclip_loss

    # the adapter refuses a loss it cannot drive (a learnable temperature of its own...)
    with as_user_error(ValueError):
        wants_short = build_openclip_loss(o.loss, o.temperature).wants_short_captions
    if wants_short:
        o.short = o.short or "first-sentence"
        if o.views is not None and (o.views.negatives or o.views.max_positives != 1):
            raise UsageError(
                "--vlr-text-views",
                f"{o.loss['type']} takes one long caption per image (and a short one): "
                "give text views with exactly one positive and no negatives",
            )
    elif o.short is not None:
        raise UsageError("--vlr-short-text", f"{o.loss['type']} takes no short captions")


def main(argv: Sequence[str] | None = None) -> int:
    """Run open_clip_train with the vlr options; returns the process exit code.

    Bad options or data raise a :class:`~vlr_plugins.errors.UserError`; the command lines
    (``vlr openclip-train`` and this module's) report it through
    :func:`~vlr_plugins.errors.run_cli` as one ``error:`` line and exit 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        build_parser().print_help()
        return 0
    from open_clip_train.main import main as open_clip_main

    from vlr_plugins.integrations.open_clip.long_context import register_long_context_configs

    register_long_context_configs()
    options, rest = resolve_arguments(argv)
    print(f"vlr: {_summary(options)}", file=sys.stderr)
    from open_clip_train.params import parse_args as parse_open_clip_args

    parsed = parse_open_clip_args(list(rest))  # open_clip_train's view of its own options
    note = _lr_print_note(parsed)
    if note:
        print(f"vlr: {note}", file=sys.stderr)
    # a training file, image or embedding-store shard that is not there is found when read
    from vlr_plugins.integrations.open_clip.patch import patched_open_clip_train  # torch and open_clip: the run's

    try:
        with _nothing_left_on_failure(parsed.logs), patched_open_clip_train(options), \
                as_user_error(FileNotFoundError):
            code = open_clip_main(rest)
    finally:
        _quiet_torch_at_exit()
    return 0 if code in (None, 0) else 1


def _quiet_torch_at_exit() -> None:
    """open_clip_train's ``setup_logging`` sets every logger to INFO, torch's too, and at exit
    TorchDynamo logs its (empty) compilation metrics at INFO: ~10 lines after every run. Its
    loggers go back to WARNING once the run is over."""
    import logging

    for name in [n for n in logging.root.manager.loggerDict if n == "torch" or n.startswith("torch.")]:
        logger = logging.getLogger(name)
        if logger.level and logger.level < logging.WARNING:
            logger.setLevel(logging.WARNING)


@contextlib.contextmanager
def _nothing_left_on_failure(logs: str | None) -> Iterator[None]:
    """open_clip_train makes its run folder (``--logs``/``--name``: params.txt, out.log) before
    our data is read: a run that stops on bad input (a ``UserError``) before writing a checkpoint
    takes the folders it made with it, and ``--logs`` itself when it was new and is left empty.
    Done by the first process only (the others stop with it)."""
    import os
    import shutil
    from pathlib import Path

    root = Path(logs) if logs else None
    existed = root is not None and root.is_dir()
    before = {p.name for p in root.iterdir()} if existed else set()
    try:
        yield
    except UserError:
        if root is not None and root.is_dir() and os.environ.get("RANK", "0") == "0":
            for made in (p for p in root.iterdir() if p.name not in before):
                if made.is_dir() and not any(made.glob("checkpoints/*.pt")):
                    shutil.rmtree(made, ignore_errors=True)
            if not existed and not any(root.iterdir()):
                root.rmdir()
        raise


def _lr_print_note(a: argparse.Namespace) -> str | None:
    """open_clip_train logs the learning rate with six decimals (``LR: 0.000000``): a run whose
    peak is below 5e-6 reads 0.000000 through (at least) its warm-up; say why once, up front."""
    if a.lr is None or a.lr >= 5e-6:
        return None
    return (f"lr {a.lr:g}: open_clip's log prints the learning rate with 6 decimals, so its 'LR' column "
            f"reads 0.000000 while the rate is below 5e-7{' (the warm-up from 0 over ' + str(a.warmup) + ' steps)' if a.warmup else ''}"
            f" and at most {a.lr:.6f} after; the rate itself is {a.lr:g} at its peak")


def _summary(o: VLRTrainOptions) -> str:
    loss = ", ".join(f"{k}={v}" for k, v in o.loss.items() if k != "type")
    parts = [f"loss {o.loss['type']}({loss})"]
    if o.temperature == "model":
        unused = " (the loss's temperature is not used)" if "temperature" in o.loss else ""
        parts.append(f"temperature = 1/logit_scale of the model{unused}")
    views = o.views.positives + o.views.negatives if o.views else ()
    parts.append(
        "texts: "
        + (
            ", ".join(
                f"{v.field}[{v.take}{'' if v.count is None else f' {v.count}'}]@{v.max_tokens}"
                for v in views
            )
            or "caption"
        )
    )
    if o.short:
        parts.append(f"short captions: {o.short}")
    if o.context_length:
        parts.append(
            f"text context stretched to {o.context_length} (first {o.keep_positions} kept"
            f"{', frozen' if o.freeze_kept_positions else ''})"
        )
    if o.image_embeddings:
        parts.append(f"image embeddings from {o.image_embeddings}")
    return "; ".join(parts)


if __name__ == "__main__":
    sys.exit(run_cli(main))
