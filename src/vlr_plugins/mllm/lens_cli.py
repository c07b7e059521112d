"""``vlr lens``: the top tokens of an MLLM's EOL embeddings through its LM head (CaReBench Figure 5)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from vlr_plugins._argtypes import at_least
from vlr_plugins.mllm.model_dtype import add_model_dtype_option

__all__ = ["add_cli"]


def _inputs(args: argparse.Namespace) -> list[tuple[str, str]]:
    from vlr_plugins.errors import UsageError

    items = [("text", t) for t in args.text or []]
    for modality in ("image", "video"):
        for path in getattr(args, modality) or []:
            if not os.path.isfile(path):
                raise UsageError(f"--{modality}", f"no such file: {path}")
            items.append((modality, path))
    if not items:
        raise UsageError("--text/--image/--video", "give at least one input to look through the lens")
    return items


def _run(args: argparse.Namespace) -> int:
    from vlr_plugins._io import atomic_write_json, check_output_dir
    from vlr_plugins.errors import ConfigError, UsageError
    from vlr_plugins.mllm.lens import logit_lens, plot_lens
    from vlr_plugins.specs import mllm_model_folder
    from vlr_plugins.mllm.loading import load_eol_embedder
    from vlr_plugins.mllm.model_dtype import dtype_name

    items = _inputs(args)
    check_output_dir(args.out, "--out")
    results, labels, dtypes = [], [], {}
    models = [(model, *mllm_model_folder(model)) for model in args.model]  # every one checked before any loads
    for model, _, prompt in models:
        if prompt is not None and args.prompt is not None and prompt != args.prompt:
            raise UsageError("--prompt", f"{args.prompt!r}, but --model {model!r} names the prompt {prompt!r}: "
                                         "give it once")
    for model, folder, prompt in models:
        emb = load_eol_embedder(folder, prompt=args.prompt or prompt, setting="--model", dtype=args.model_dtype,
                                device=args.device)
        dtypes[model] = dtype_name(emb.model)
        if emb.kind == "llm" and any(m != "text" for m, _ in items):
            raise ConfigError(f"--model: {model} is a text-only language model; it has no lens for images or videos")
        for modality, item in items:
            result = logit_lens(emb, modality, item, top_k=args.top_k)
            results.append((model, result))
            labels.append(f"{os.path.basename(os.path.normpath(model))}: {modality} {os.path.basename(item)}"
                          if modality != "text" else f"{os.path.basename(os.path.normpath(model))}: {item}")
            print(f"== {labels[-1]}")
            print(result.table())
    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, "lens.json")
    atomic_write_json(json_path, [{"model": model, "model_dtype": dtypes[model], **r.to_dict()}
                                  for model, r in results])
    written = [json_path]
    if not args.no_plot:
        written.append(plot_lens([r for _, r in results], os.path.join(args.out, "lens.png"), labels,
                                 title=f"logit lens, top {args.top_k}"))
    print(f"results: {', '.join(written)}")
    return 0


def add_cli(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``vlr lens`` to the ``vlr`` command's subparsers (nothing heavy is imported here)."""
    s = subparsers.add_parser(
        "lens", help="the top tokens of an MLLM's EOL embedding through its LM head (CaReBench Fig. 5)",
        description="Embed each input as the embedder does (the last token's state under the EOL "
                    "prompt, after the final norm), feed it through the model's LM head, and print "
                    "and plot the top-k tokens with their logits and probabilities. Give --model "
                    "twice to compare two models (a base MLLM and its CaRe training) as Figure 5 does. "
                    "docs/care.md.")
    s.add_argument("--model", required=True, action="append",
                   help="an MLLM or LLM folder / Hub id, or a `vlr` MLLM export (repeat to compare)")
    s.add_argument("--prompt", help="EOL prompt family or YAML file (default: an export's own, else care)")
    s.add_argument("--text", action="append", help="a sentence (repeatable)")
    s.add_argument("--image", action="append", help="an image file (repeatable)")
    s.add_argument("--video", action="append", help="a video file (repeatable)")
    s.add_argument("--top-k", type=at_least(1), default=20)
    s.add_argument("--out", default="vlr-lens", help="the folder for lens.json and lens.png")
    s.add_argument("--no-plot", action="store_true", help="no lens.png (no matplotlib needed)")
    add_model_dtype_option(s, "--dtype")
    s.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    s.set_defaults(fn=_run)
    return s
