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

from vlr_plugins._argtypes import at_least
from vlr_plugins.errors import MissingFileError, UsageError, UserError, run_cli
from vlr_plugins.recipe.overrides import parse_set_items as _parse_set

__all__ = ["main"]


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
                    with open(path, encoding="utf-8") as f:
                        native = (yaml.safe_load(f) or {}).get("vlr")
                    if isinstance(native, dict):  # a trainer's own config (LAVIS run config, CaRe's MMEngine config)
                        label = native.get("kind") or name.split("/")[0]
                        desc = f"[{'LAVIS' if label == 'lavis' else label}] {native['description']}"
                    else:
                        desc = load_recipe(path).description
                except Exception as e:  # a broken shipped recipe is shown, not hidden
                    desc = f"(invalid: {e})"
                print(f"  {name:<28} {desc}")
        else:
            for e in all_registries()[kind].entries(args.pattern):
                print(f"  {e.name:<28} {e.description}")
    return 0


def _dotted_set(items: Sequence[str]) -> dict[str, Any]:
    """``--set`` items as MMEngine's dotted overrides; a mapping value replaces the whole
    section (``optim_wrapper={type: OptimWrapper, optimizer: {...}}``) instead of merging."""
    _parse_set(items)  # the same checks and messages as for recipes
    out: dict[str, Any] = {}
    for item in items:
        key, _, raw = item.partition("=")
        value = yaml.safe_load(raw)
        out[key.strip()] = {"_delete_": True, **value} if isinstance(value, dict) else value
    return out


def _train_native(args: argparse.Namespace, path: str) -> int:
    """``vlr train care/...``: a recipe that is an MMEngine config already (integrations/mmengine/native.py)."""
    from vlr_plugins.integrations.mmengine.console import build_runner, third_party_warnings
    from vlr_plugins.integrations.mmengine.native import load_native_config
    from vlr_plugins.integrations.mmengine.preflight import (
        check_launcher,
        check_output_file,
        check_output_folder,
        check_resume,
        nothing_left_on_failure,
    )

    if args.image_embeddings or args.tokenizer:
        option = "--image-embeddings" if args.image_embeddings else "--tokenizer"
        raise UsageError(option, f"{args.recipe} is an MMEngine config: set its keys with --set")
    with third_party_warnings(args.verbose):
        cfg, vlr = load_native_config(path, overrides=_dotted_set(args.set or []), train=args.train,
                                      work_dir=args.work_dir)
        cfg.launcher = args.launcher
        check_output_folder(cfg.work_dir, "--work-dir")
        if args.resume:
            check_resume(args.resume, cfg.work_dir, train_cfg=cfg.get("train_cfg"))
            cfg.resume = True
            cfg.load_from = None if args.resume == "auto" else args.resume
        if args.dump_config:
            check_output_file(args.dump_config, "--dump-config")
            cfg.dump(args.dump_config)
            print(f"wrote {args.dump_config}")
            return 0
        check_launcher(args.launcher)
        with nothing_left_on_failure(cfg.work_dir):
            runner = build_runner(cfg, verbose=args.verbose)  # Runner, or the recipe's FlexibleRunner
            print(f"training {vlr.get('name', args.recipe)} in {cfg.work_dir}; full log: "
                  f"{os.path.join(runner.log_dir, runner.timestamp + '.log')}", flush=True)
            runner.train()
    return 0


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


def cmd_train(args: argparse.Namespace) -> int:
    from mmengine.config import Config

    from vlr_plugins.integrations.mmengine.native import is_native_config
    from vlr_plugins.recipe import find_recipe

    path = find_recipe(args.recipe)
    _refuse_other_command(args.recipe, path)
    if is_native_config(path):
        return _train_native(args, str(path))

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
        check_resume(args.resume, work_dir, train_cfg={"max_epochs": recipe.train.epochs},
                     settings={"max_epochs": "train.epochs"})
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


def _positive_int(text: str) -> int:
    """argparse type of a count (``--batch-size``): an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found {value}")
    return value


def _non_negative_int(text: str) -> int:
    """argparse type of a count that may be 0 (``--workers``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, found {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, found {value}")
    return value


def _check_device(text: str) -> str:
    """``--device`` as given, once it names a device this machine has; checked before any work."""
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise UsageError("--device", f"expected cpu, cuda, cuda:N or mps, found {text!r}") from None
    backend = getattr(torch, device.type, None) if device.type != "cpu" else None
    if backend is not None and hasattr(backend, "is_available") and not backend.is_available():
        built = "" if device.type != "cuda" or torch.version.cuda else f" (this torch {torch.__version__} has no CUDA)"
        raise UsageError("--device", f"{text!r}: no {device.type} device is available on this machine{built}; "
                                     "use --device cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UsageError("--device", f"{text!r}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                                     f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    return text


def _check_model_dtype(args: argparse.Namespace, spec: str, option: str) -> None:
    """``--model-dtype`` other than auto is for ``mllm:`` specs only (the other models load as
    their own code loads them); refused before anything loads."""
    if args.model_dtype != "auto" and not spec.startswith("mllm:"):
        raise UsageError("--model-dtype", f"{args.model_dtype} is for mllm:FOLDER[:PROMPT] models (CaRe, E5-V); "
                                          f"{option} {spec!r} is loaded as its own code loads it")


def _model_dtype_record(args: argparse.Namespace, model: Any, spec: str, device: str) -> dict[str, str]:
    """``{"model_dtype": "bfloat16"}``: the dtype an ``mllm:`` model computes in, as a run
    records it beside the spec (a store's meta, results.json); ``{}`` for other models. Under
    ``--model-dtype auto`` a half dtype on a CPU is warned of (float32 is much faster there)."""
    if not spec.startswith("mllm:"):
        return {}
    from vlr_plugins.mllm.model_dtype import dtype_name, slow_on_cpu

    note = slow_on_cpu(model, device) if args.model_dtype == "auto" else None
    if note:
        print(f"warning: {spec}: {note}", file=sys.stderr)
    return {"model_dtype": dtype_name(model)}


def cmd_precompute(args: argparse.Namespace) -> int:
    import torch

    from vlr_plugins._io import check_output_dir

    # everything a run can be refused for is checked before a file is written or an item encoded
    video_options = {"--frames": args.frames, "--sampler": args.sampler, "--seed": args.seed,
                     "--backend": args.backend, "--resume": args.resume or None}
    if args.images is not None:
        given = [option for option, value in video_options.items() if value is not None]
        if given:
            raise UsageError(given[0], "is for --videos and --benchmarks; an image store is written all at once "
                                       "from --images")
    if args.resume and args.overwrite:
        raise UsageError("--resume", "and --overwrite exclude each other: --resume keeps the rows already written, "
                                     "--overwrite discards them")
    _check_model_dtype(args, args.encoder, "--encoder")
    device = _check_device(args.device)
    check_output_dir(args.out, "--out", replaced_whole=True)
    dtype = {"float32": torch.float32, "float16": torch.float16}[args.dtype]
    if args.images is not None:
        from vlr_plugins.data.embedding_store import check_store_target
        from vlr_plugins.data.precompute import list_images, load_encoder, precompute_image_embeddings

        check_store_target(args.out, overwrite=args.overwrite, flag="--overwrite")
        images = list_images(args.images)
        options = {"device": device} if args.encoder.startswith(("blip:", "mllm:")) else {}
        if args.encoder.startswith("mllm:"):
            options["dtype"] = args.model_dtype
        encoder = load_encoder(args.encoder, setting="--encoder", **options)
        recorded = _model_dtype_record(args, getattr(encoder, "embedder", None), args.encoder, device)
        store = precompute_image_embeddings(encoder, images, args.out, batch_size=args.batch_size or 64, dtype=dtype,
                                            meta={"encoder": args.encoder, **recorded}, overwrite=args.overwrite,
                                            **({"num_workers": args.workers} if args.workers is not None else {}))
        print(f"wrote {len(store)} embeddings of dim {store.dim} to {args.out}")
        return 0

    from vlr_plugins.data.precompute_video import (
        failures_path_of,
        precompute_video_embeddings,
        video_store_meta,
    )
    from vlr_plugins.data.resumable_store import check_resumable_target, work_dir_of
    from vlr_plugins.data.video_encoders import load_video_encoder
    from vlr_plugins.data.video_sources import benchmark_videos, list_videos

    flags = {"resume_flag": "--resume", "overwrite_flag": "--overwrite"}
    check_resumable_target(args.out, resume=args.resume, overwrite=args.overwrite, **flags)
    failures = failures_path_of(args.out)
    if failures.is_dir():
        raise UsageError("--out", f"the videos that cannot be decoded are listed in {failures}, which is a folder")
    frames, sampler = args.frames or 16, args.sampler or "middle"
    seed, backend = 0 if args.seed is None else args.seed, args.backend or "pyav"
    if backend == "torchcodec":
        try:
            from torchcodec.decoders import VideoDecoder  # noqa: F401
        except Exception as e:  # ImportError, or OSError / RuntimeError when FFmpeg's libraries are missing
            reason = (str(e).strip().splitlines() or [""])[0]
            raise UsageError("--backend", f"torchcodec cannot load here ({type(e).__name__}: {reason}); it needs "
                                          "FFmpeg's shared libraries (docs/video.md); use --backend pyav") from None
    videos = list_videos(args.videos) if args.videos is not None else benchmark_videos(args.benchmarks)
    encoder = load_video_encoder(args.encoder, setting="--encoder", device=device, dtype=args.model_dtype)
    wanted = getattr(encoder, "num_frames", None)
    if isinstance(wanted, int) and wanted != frames:
        raise UsageError("--frames", f"{frames}, but the tower of --encoder {args.encoder!r} takes {wanted}-frame "
                                     f"clips; pass --frames {wanted}")
    recorded = _model_dtype_record(args, encoder, args.encoder, device)  # a resumed run must match it too
    meta = {**video_store_meta(encoder, args.encoder, frames=frames, sampler=sampler, seed=seed, backend=backend),
            **recorded}
    dim = getattr(encoder, "embed_dim", None)
    check_resumable_target(args.out, resume=args.resume, overwrite=args.overwrite, dtype=dtype, meta=meta,
                           dim=dim if isinstance(dim, int) else None, **flags)
    try:
        store, failed = precompute_video_embeddings(
            encoder, videos, args.out, frames=frames, sampler=sampler, seed=seed, backend=backend,
            batch_size=args.batch_size or 16, num_workers=4 if args.workers is None else args.workers, dtype=dtype,
            resume=args.resume, overwrite=args.overwrite, meta={"encoder": args.encoder, **recorded})
    except KeyboardInterrupt:
        if work_dir_of(args.out).is_dir():
            print(f"the embeddings written so far are kept in {work_dir_of(args.out)}; run the same command with "
                  "--resume to finish the store", file=sys.stderr)
        raise
    print(f"wrote {len(store)} embeddings of dim {store.dim} to {args.out}")
    if failed:
        print(f"error: {failed} of {len(videos)} videos could not be decoded; they are listed with the decoder's "
              f"reason in {failures} (the store holds every other video; fix or remove them and rerun with --resume)",
              file=sys.stderr)
        return 2
    return 0


_MIN_TOKENS = 3  # [CLS] and [SEP] take 2


def _pairs(items: Sequence[str] | None, option: str) -> dict[str, int]:
    """``["short=20"]`` -> ``{"short": 20}``; budgets below 3 tokens are refused."""
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name or not value.isdigit():
            raise UsageError(option, f"expected NAME=INTEGER, found {item!r}")
        if int(value) < _MIN_TOKENS:
            raise UsageError(option, f"{item!r}: a budget must leave room for a word (>= {_MIN_TOKENS} tokens, "
                                     "special tokens included)")
        out[name] = int(value)
    return out


def _integers(text: str | None, option: str) -> list[int] | None:
    """``"20,40,77"`` -> ``[20, 40, 77]``: distinct budgets of at least 3 tokens."""
    if not text:
        return None
    try:
        values = [int(b) for b in text.split(",")]
    except ValueError:
        raise UsageError(option, f"expected integers such as 20,40,77, found {text!r}") from None
    if min(values) < _MIN_TOKENS:
        raise UsageError(option, f"budgets must leave room for a word (>= {_MIN_TOKENS} tokens, special tokens "
                                 f"included), found {min(values)}")
    if len(set(values)) < len(values):
        raise UsageError(option, f"a budget is given twice in {text!r}")
    return values


def _text_encoder(spec: str, option: str):
    """The text encoder ``spec`` names (a ``vlr train`` checkpoint or ``blip:<name>``), each
    way it can be unusable refused as one error naming ``option``."""
    from vlr_plugins.checkpoint_meta import check_text_encoder_checkpoint
    from vlr_plugins.errors import loading_pretrained
    from vlr_plugins.text import load_text_encoder

    if spec.startswith("blip:"):
        name = spec[len("blip:"):]
        if not name:
            raise UsageError(option, "'blip:' needs a model name or folder after the colon")
        with loading_pretrained(name, option):
            return load_text_encoder(spec, setting=option)
    if os.path.isdir(spec):
        raise UsageError(option, f"{spec} is a folder: give the .pth checkpoint `vlr train` wrote, or "
                                 f"blip:{spec} for a BLIP model folder")
    if not os.path.exists(spec):
        raise MissingFileError(f"{option}: no checkpoint at {spec} (give the .pth `vlr train` wrote, or "
                               "blip:<hub name or folder>)")
    # weights-only, with the architecture and the text encoder's weights: refused here, with
    # the file named, rather than by torch.load's traceback
    check_text_encoder_checkpoint(spec)
    return load_text_encoder(spec, setting=option)


def _tokenizer(given: str | None, encoder: Any, model: str):
    """The tokenizer of ``--tokenizer``, else the one the model names."""
    from transformers import AutoTokenizer

    from vlr_plugins.errors import loading_pretrained

    path = given or getattr(encoder, "tokenizer_path", None)
    if not path:
        raise UsageError("--tokenizer", f"{model} names no tokenizer; pass one")
    setting = "--tokenizer" if given else f"--tokenizer (the tokenizer {model} names: {path})"
    with loading_pretrained(str(path), setting):
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    embeddings = getattr(getattr(encoder, "text_encoder", None), "get_input_embeddings", lambda: None)()
    vocab = getattr(embeddings, "num_embeddings", None)
    if vocab is not None and len(tokenizer) > vocab:
        raise UsageError("--tokenizer", f"{path} has {len(tokenizer)} tokens but {model} embeds only {vocab}: "
                                        "give the tokenizer it was trained with")
    return tokenizer


def _check_budgets(specs, budgets: dict[str, int], overrides: dict[str, int], protocol: str | None,
                   truncation: list[int] | None, max_positions: int | None, benchmarks: str) -> None:
    """The budgets the options give, against the benchmarks file and the encoder's positions."""
    names = [spec.name for spec in specs]
    for name in overrides:
        if name not in names:
            raise UsageError("--budget", f"{name!r} is no benchmark of {benchmarks} (its benchmarks: "
                                         f"{', '.join(names)})")
    if max_positions is None:
        return
    for spec in specs:
        budget = budgets.get(spec.name)
        if spec.max_tokens is None and budget is not None and budget > max_positions:
            option = "--budget" if spec.name in overrides else f"--protocol {protocol}"
            raise UsageError(option, f"{spec.name}={budget} exceeds the text encoder's {max_positions} positions")
    if truncation and max(truncation) > max_positions:
        raise UsageError("--truncation", f"{max(truncation)} exceeds the text encoder's {max_positions} positions")


def _table_names(text: str | None) -> list[str]:
    """``--tables mvc-table1,carebench-table4`` -> the names, each a shipped table layout."""
    from vlr_plugins.eval.tables import list_tables

    if not text:
        return []
    names = [n.strip() for n in text.split(",")]
    for name in names:
        if name not in list_tables():
            raise UsageError("--tables", f"unknown table {name!r}; known: {', '.join(list_tables())}")
    if len(set(names)) < len(names):
        raise UsageError("--tables", f"a table is named twice in {text!r}")
    return names


def _check_tables(names: Sequence[str], specs, benchmarks: str) -> None:
    """Every table fills at least one column from the benchmarks; those it leaves empty are said."""
    from vlr_plugins.eval.tables import list_tables

    keys = [key for spec in specs for key in spec.result_keys()]
    for name in names:
        wanted = list_tables()[name].benchmarks()
        missing = [b for b in wanted if b not in keys]
        if len(missing) == len(wanted):
            raise UsageError("--tables", f"{name} reads benchmarks {', '.join(wanted)}, and {benchmarks} scores none "
                                         f"of them (it scores: {', '.join(keys)}); name them so, with text_kinds "
                                         "for a text kind (docs/eval.md)")
        if missing:
            print(f"warning: --tables {name}: {benchmarks} does not score {', '.join(missing)}; "
                  "their columns stay empty", file=sys.stderr)


def _eval_model(args: argparse.Namespace, specs, budgets: dict[str, int], overrides: dict[str, int],
                protocol: str | None, truncation: list[int] | None, device: str):
    """``(model, tokenizer, budgets)`` of ``--model``: a checkpoint with its tokenizer and the
    protocol's budgets, or a text model (open_clip, module:callable) and only the given ones."""
    from vlr_plugins.eval.models import load_text_model, text_model_source

    if text_model_source(args.model) == "checkpoint":
        encoder = _text_encoder(args.model, "--model")
        _check_budgets(specs, budgets, overrides, protocol, truncation, getattr(encoder, "max_positions", None),
                       args.benchmarks)
        tokenizer = _tokenizer(args.tokenizer, encoder, args.model)
        if args.rerank_k is not None:
            raise UsageError("--rerank-k", f"{args.model} is a text encoder without a matching head; re-ranking "
                                           "needs a model with match_scores (docs/eval.md)")
        return encoder.to(device), tokenizer, budgets
    for option, given in (("--tokenizer", args.tokenizer), ("--truncation", truncation)):
        if given:
            raise UsageError(option, f"{args.model} tokenizes its texts itself; {option} is for `vlr train` "
                                     "checkpoints and blip: models")
    model = load_text_model(args.model, setting="--model", device=device, dtype=args.model_dtype)
    _check_budgets(specs, overrides, overrides, protocol, None, getattr(model, "max_positions", None),
                   args.benchmarks)
    if args.rerank_k is not None and not callable(getattr(model, "match_scores", None)):
        raise UsageError("--rerank-k", f"{args.model} has no matching head: re-ranking needs "
                                       "match_scores(item_ids, item_emb, texts) (docs/eval.md)")
    return model, None, overrides


def _capst_for_unified(path: str | None, specs, benchmarks: str) -> tuple[dict | None, str | None]:
    """``--capst``: the CapST results and the CaReBench general result key the unified score reads."""
    if path is None:
        return None, None
    from vlr_plugins.eval.capst import load_capst_result

    if not os.path.isfile(path):
        raise UsageError("--capst", f"no such file: {path}")
    care = [s for s in specs if s.reader == "carebench"]
    if len(care) != 1:
        found = "none" if not care else ", ".join(s.name for s in care)
        raise UsageError("--capst", f"the unified score joins CapST with CaReBench general retrieval; "
                                    f"{benchmarks} must score one carebench benchmark, found {found}")
    keys = care[0].result_keys()
    key = f"{care[0].name}/general" if f"{care[0].name}/general" in keys else care[0].name
    if key not in keys:
        raise UsageError("--capst", f"{care[0].where('text_kinds')} leaves out 'general', which the unified "
                                    f"score reads")
    return load_capst_result(path), key


def cmd_eval(args: argparse.Namespace) -> int:
    import torch

    from vlr_plugins._io import check_output_dir
    from vlr_plugins.eval import evaluate_benchmarks, list_protocols, load_benchmark_specs, token_budgets
    from vlr_plugins.eval.report_files import write_eval_report

    # options, output folder, benchmarks file, model: all checked before any text is encoded
    protocol = None if args.protocol in (None, "none") else args.protocol
    if protocol is not None and protocol not in list_protocols():
        raise UsageError("--protocol", f"unknown protocol {protocol!r}; known: {', '.join(list_protocols())}, or none")
    overrides = _pairs(args.budget, "--budget")
    budgets = token_budgets(protocol, overrides)
    truncation = _integers(args.truncation, "--truncation")
    tables = _table_names(args.tables)
    _check_model_dtype(args, args.model, "--model")
    device = _check_device(args.device)
    check_output_dir(args.out, "--out")
    specs = load_benchmark_specs(args.benchmarks)
    _check_tables(tables, specs, args.benchmarks)
    capst, capst_benchmark = _capst_for_unified(args.capst, specs, args.benchmarks)
    model, tokenizer, budgets = _eval_model(args, specs, budgets, overrides, protocol, truncation, device)
    recorded = _model_dtype_record(args, model, args.model, device)
    label = args.label or os.path.splitext(os.path.basename(str(args.model).rstrip("/")))[0]

    def warn(message: str) -> None:
        print(f"warning: {message}", file=sys.stderr)

    # the engine reads and checks every benchmark and store before it encodes the first text
    with torch.inference_mode():
        result = evaluate_benchmarks(model, tokenizer, specs, budgets=budgets, truncation=truncation,
                                     batch_size=args.batch_size, device=device, protocol=protocol,
                                     rerank_k=args.rerank_k, on_warning=warn)
    unified = None
    if capst is not None:
        from vlr_plugins.eval.capst import unified_score

        unified = {**unified_score(result, capst, benchmark=capst_benchmark), "benchmark": capst_benchmark,
                   "capst": str(args.capst)}
    report = write_eval_report(result, args.out, model=str(args.model), label=label, protocol=protocol,
                               tables=tables, unified=unified, model_dtype=recorded.get("model_dtype"))
    if report["plots"] is None:
        print("matplotlib is not installed (the [plot] extra): no plots written", file=sys.stderr)
    print(report["table"])
    print(f"results: {report['json']}, {report['markdown']}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from vlr_plugins._io import check_output_dir
    from vlr_plugins.checkpoint_meta import check_text_encoder_checkpoint
    from vlr_plugins.hf import check_export_target, export_text_encoder
    from vlr_plugins.hf.card import card_files
    from vlr_plugins.hf.eol_export_command import is_model_folder, run_eol_export

    if is_model_folder(args.checkpoint):  # an MLLM / LLM folder: the EOL-embedder family (CaRe, E5-V)
        return run_eol_export(args)
    for option in ("prompt", "config", "recipe"):
        if getattr(args, option) is not None:
            raise UsageError(f"--{option}", "is for an MLLM folder (CaRe, E5-V); CHECKPOINT is a `vlr train` .pth")

    # the output, the checkpoint and the --eval files are checked before the model is loaded
    check_output_dir(args.out, "OUT", replaced_whole=True)
    check_export_target(args.out, overwrite=args.overwrite, flag="--overwrite")
    meta = check_text_encoder_checkpoint(args.checkpoint)
    name = args.name or os.path.basename(os.path.normpath(args.out))
    extra = card_files(meta, model_name=name, repo_id=args.repo_id, eval_paths=args.eval,
                       license=args.license)
    encoder = _text_encoder(args.checkpoint, "CHECKPOINT")
    tokenizer = _tokenizer(args.tokenizer, encoder, args.checkpoint)
    if "README.md" not in extra:
        print("no recipe recorded with this model: no model card written", file=sys.stderr)
    out = export_text_encoder(encoder, args.out, tokenizer=tokenizer, recipe=meta.get("vlr_recipe"),
                              remote_code=not args.no_remote_code, overwrite=args.overwrite, extra_files=extra)
    print(f"exported to {out}" + (" (with model card)" if "README.md" in extra else ""))
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    from vlr_plugins.hf.push import cmd_push as push

    return push(args)


def _demo_mvc(args: argparse.Namespace) -> int:
    """``vlr demo mvc``: Baseline-B and MVC-B on the synthetic video world (demo_mvc.py)."""
    from vlr_plugins.demo_mvc import MVCDemoConfig, run_mvc_demo
    from vlr_plugins.integrations.mmengine.preflight import check_output_folder

    if args.recipes:
        raise UsageError("--recipes", "vlr demo mvc trains mvc/baseline_b and mvc/mvc_b; --recipes picks "
                                      "paragraph recipes for the paragraph demo (vlr demo)")
    out = args.out or "vlr-demo-mvc"
    check_output_folder(out, "--out")
    cfg = MVCDemoConfig(out_dir=out, seed=args.seed)
    if args.quick:
        cfg.num_train, cfg.num_eval, cfg.epochs, cfg.batch_size, cfg.width, cfg.depth = 32, 8, 1, 8, 32, 1
    if args.epochs:
        cfg.epochs = args.epochs
    report = run_mvc_demo(cfg)
    print(report["table"])
    print(f"report: {out}/report.md, {out}/report.json" + (f", {report['plot']}" if report["plot"] else ""))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    if args.which == "mvc":
        return _demo_mvc(args)
    from vlr_plugins.demo import DemoConfig, run_demo
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
    from vlr_plugins.mllm.model_dtype import add_model_dtype_option

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
    s.add_argument("--set", nargs="*", action="extend", metavar="KEY=VALUE",
                   help="recipe overrides, e.g. train.epochs=2 (several --set add up; a later value wins)")
    s.add_argument("--dump-config", metavar="PATH", help="write the MMEngine config and exit")
    s.add_argument("--verbose", action="store_true",
                   help="show MMEngine's whole console log (environment, config, hooks) and third-party "
                        "deprecation warnings; by default they go to the run's log file only")
    s.set_defaults(fn=cmd_train)

    s = sub.add_parser(
        "precompute", help="embed images or videos once with a frozen vision tower into a store",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Embed images or videos once with a frozen vision tower into an embedding store.\n\n"
                    "Image ids: an image's id is its path relative to the --images folder, without the\n"
                    "extension, '/'-separated (images/2021/cat.jpg -> 2021/cat); in a .txt list, the path as\n"
                    "written without the extension; in a .jsonl list, each line's \"id\". Training samples and\n"
                    "benchmark items must use these ids. Video ids follow the same rules (a .jsonl list may\n"
                    "add \"start\" / \"end\" seconds for a clip of a longer video); --benchmarks takes the\n"
                    "ids the benchmarks' readers give.\n\n"
                    "--encoder module:callable: MODULE is imported (the current folder first, as python -m\n"
                    "does) and CALLABLE taken from it: a function, or an object with __call__, mapping a list\n"
                    "of RGB PIL images to an (n, D) tensor, one finite row per image; or a class whose\n"
                    "instances do (created without arguments). An int attribute `dim` and a str attribute\n"
                    "`name` are used when present. blip:<hub name or folder> is BLIP's image side;\n"
                    "mllm:FOLDER[:PROMPT] a CaRe / E5-V MLLM's (EOL prompt, docs/care.md).\n\n"
                    "For videos, --encoder is open_clip:MODEL[:PRETRAINED] (frame-pooled open_clip tower;\n"
                    "PRETRAINED a checkpoint file or an open_clip tag), a tower config (.yaml/.json: type:\n"
                    "FramePooledVideoEncoder or SpaceTimeViT, its arguments, optional checkpoint:),\n"
                    "vlr:CHECKPOINT (the video tower a vlr train mvc/... run trained, docs/mvc.md),\n"
                    "mllm:FOLDER[:PROMPT] (a CaRe / E5-V MLLM folder or vlr export under an EOL prompt such\n"
                    "as care or e5v, in --model-dtype; CaReBench: --frames 32 --sampler uniform;\n"
                    "docs/care.md), or module:callable giving a video tower: encode_video(frames\n"
                    "(B, T, 3, H, W)) -> (B, D), image_mean, image_std, image_size. Video stores are written\n"
                    "resumably: a killed run keeps what it wrote, and --resume finishes it (or adds new\n"
                    "videos to a store). Videos that cannot be decoded are listed in OUT.failures.jsonl;\n"
                    "the run goes on and exits 2.")
    source = s.add_mutually_exclusive_group(required=True)
    source.add_argument("--images", help="a folder, or a .txt / .jsonl list of images")
    source.add_argument("--videos", help="a folder, or a .txt / .jsonl list of videos")
    source.add_argument("--benchmarks", metavar="YAML",
                        help="every video of the benchmarks in a `vlr eval` benchmarks file, with their item ids")
    s.add_argument("--encoder", required=True,
                   help="images: blip:<hub name or folder> (BlipForImageTextRetrieval), mllm:FOLDER[:PROMPT] or "
                        "module:callable; videos: "
                        "open_clip:MODEL[:PRETRAINED], a tower config file, vlr:CHECKPOINT, mllm:FOLDER[:PROMPT] "
                        "or module:callable (see above)")
    s.add_argument("--out", required=True, help="the store folder to write")
    s.add_argument("--frames", type=_positive_int, help="frames per video (default 16)")
    s.add_argument("--sampler", choices=["rand", "middle", "uniform"],
                   help="which frames (default middle: the middle frame of N equal segments, UMT's evaluation)")
    s.add_argument("--seed", type=int, help="seed of --sampler rand (default 0; each video draws from its own)")
    s.add_argument("--backend", choices=["pyav", "torchcodec"], help="video decoder (default pyav)")
    s.add_argument("--workers", type=_non_negative_int,
                   help="processes decoding videos, threads reading images (default 4; 0: none)")
    s.add_argument("--batch-size", type=_positive_int, help="items per encoder call (default 64 images, 16 videos)")
    s.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (blip:, mllm: and video encoders)")
    s.add_argument("--dtype", choices=["float32", "float16"], default="float32",
                   help="the dtype the store keeps its rows in (the model's own: --model-dtype)")
    add_model_dtype_option(s, what="an mllm: --encoder")
    s.add_argument("--resume", action="store_true",
                   help="keep the videos a killed run (or an earlier store) already holds and add the rest")
    s.add_argument("--overwrite", action="store_true", help="replace an existing store at --out (start over)")
    s.set_defaults(fn=cmd_precompute)

    s = sub.add_parser(
        "eval", help="recall@1/5/10 of a text model on image or video benchmarks (streaming, exact)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Recall@1/5/10, both directions, of a text model against precomputed item embeddings\n"
                    "(images or videos; `vlr precompute`), in the papers' tables if asked (docs/eval.md).\n\n"
                    "--model: a `vlr train` checkpoint (.pth); blip:<hub name or folder>;\n"
                    "open_clip:MODEL:CHECKPOINT_OR_TAG (open_clip:ViT-B-32:openai,\n"
                    "open_clip:ViT-B-16-quickgelu-ctx248:epoch_6.pt, open_clip:hf-hub:org/name, open_clip:local-dir:DIR);\n"
                    "mllm:FOLDER[:PROMPT], a CaRe / E5-V MLLM folder or vlr export under an EOL prompt (care, e5v);\n"
                    "or module:callable, an object with encode_text(texts) -> (N, D) (the module imported from\n"
                    "the current folder first; a class or function is called without arguments to make it).")
    s.add_argument("--model", required=True,
                   help="a checkpoint (.pth), blip:<name>, open_clip:MODEL:CHECKPOINT_OR_TAG, mllm:FOLDER[:PROMPT] "
                        "or module:callable")
    s.add_argument("--benchmarks", required=True, help="YAML: benchmarks: [{name, reader, path, item_embeddings, ...}]")
    s.add_argument("--protocol", default="paragraph-supervision/table2",
                   help="per benchmark: token budget, frames and sampler, text view (eval/protocols.yaml); "
                        "'none' for only --budget")
    s.add_argument("--budget", nargs="*", metavar="NAME=N", help="override a benchmark's token budget")
    s.add_argument("--truncation", metavar="20,40,...", help="also sweep these encoding budgets and plot them")
    s.add_argument("--tables", metavar="NAME,...",
                   help="also lay the results out as the papers' tables: mvc-table1, mvc-table3, carebench-table3, "
                        "carebench-table4")
    s.add_argument("--capst", metavar="CAPST_JSON",
                   help="the same model's `vlr capst` capst.json: adds CaRe's unified score (CaReBench Table 5)")
    s.add_argument("--rerank-k", type=_positive_int, metavar="K",
                   help="re-rank each query's top K by the model's matching head (match_scores); UMT uses 128")
    s.add_argument("--tokenizer", help="default: the encoder's (checkpoints and blip: only)")
    s.add_argument("--label", help="name of this model in the report (default: file name)")
    s.add_argument("--out", default="vlr-eval", help="the folder to write the results into")
    s.add_argument("--batch-size", type=_positive_int, default=256)
    s.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps")
    add_model_dtype_option(s, what="an mllm: --model")
    s.set_defaults(fn=cmd_eval)

    s = sub.add_parser("export", help="a trained checkpoint -> a Hub-ready transformers folder with a model card")
    s.add_argument("checkpoint", metavar="CHECKPOINT",
                   help="a `vlr train` checkpoint (.pth), blip:<hub name or folder>, or an MLLM / LLM transformers "
                        "folder (CaRe, E5-V: exported as an EOL embedder, docs/care.md)")
    s.add_argument("out", metavar="OUT",
                   help="the folder to write (config.json, model.safetensors, code, tokenizer, README.md)")
    s.add_argument("--eval", nargs="*", metavar="RESULTS_JSON", help="`vlr eval` results to put in the card")
    s.add_argument("--name", help="model name in the card (default: the folder name)")
    s.add_argument("--repo-id", help="Hub id used in the card's usage example")
    s.add_argument("--license", help="license id for the card metadata")
    s.add_argument("--tokenizer", help="default: the encoder's")
    s.add_argument("--no-remote-code", action="store_true",
                   help="do not ship modeling code (loading then needs `import vlr_plugins.hf`)")
    s.add_argument("--overwrite", action="store_true", help="replace an earlier export at OUT")
    s.add_argument("--prompt", help="MLLM folder: the EOL prompt family or YAML file (default: care)")
    s.add_argument("--config", help="MLLM folder: the MMEngine config of the run, for the card's recipe table")
    s.add_argument("--recipe", help="MLLM folder: the recipe name to record (default: the config's vlr.name)")
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

    s = sub.add_parser("demo", help="run C1/C5/C7 on a synthetic world (vlr demo mvc: Baseline-B and MVC-B on "
                                    "synthetic videos), offline, on a CPU")
    s.add_argument("which", nargs="?", choices=["mvc"],
                   help="mvc: multi-view-captions pretraining on a synthetic video world (default: paragraph demo)")
    s.add_argument("--out", help="output folder (default vlr-demo, or vlr-demo-mvc)")
    s.add_argument("--recipes", nargs="*", help="shipped recipe names (default: paragraph/c1 c5 c7)")
    s.add_argument("--epochs", type=at_least(1))
    s.add_argument("--seed", type=at_least(0), default=0)
    s.add_argument("--quick", action="store_true", help="a tiny run (seconds), for smoke tests")
    s.add_argument("--verbose", action="store_true",
                   help="show MMEngine's whole console output and every deprecation warning")
    s.set_defaults(fn=cmd_demo)

    from vlr_plugins.eval.capst.cli import add_cli as add_capst

    add_capst(sub)
    from vlr_plugins.mllm.caption_cli import add_cli as add_caption

    add_caption(sub)
    from vlr_plugins.mllm.lens_cli import add_cli as add_lens

    add_lens(sub)
    from vlr_plugins.generate.cli import add_cli as add_generate

    add_generate(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``vlr`` with ``argv`` (default: the process's); returns the exit status (see
    :func:`vlr_plugins.errors.run_cli`: 2 for a :class:`~vlr_plugins.errors.UserError`)."""
    args = build_parser().parse_args(argv)
    return run_cli(lambda: args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
