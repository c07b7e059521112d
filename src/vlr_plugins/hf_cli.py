"""``vlr export`` (a trained checkpoint or an MLLM folder -> a Hub-ready transformers folder with
a model card) and ``vlr push`` (that folder -> the Hugging Face Hub); docs/hub.md.

This module lives beside :mod:`vlr_plugins.hf`, not in it: importing that package imports
transformers and registers the Auto classes, which ``vlr --help`` must not wait for (nor
need: the LAVIS environment's transformers is older).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from vlr_plugins.errors import UsageError
from vlr_plugins.specs import load_checked_text_encoder, load_text_tokenizer, parse_model_spec, text_encoder_meta

__all__ = ["add_export_cli", "add_push_cli", "cmd_export", "cmd_push"]


def cmd_export(args: argparse.Namespace) -> int:
    from vlr_plugins._io import check_output_dir
    from vlr_plugins.hf import check_export_target, export_text_encoder
    from vlr_plugins.hf.card import card_files, merge_eval_results
    from vlr_plugins.hf.eol_export_command import is_model_folder, run_eol_export

    spec = parse_model_spec(args.checkpoint, "text")
    if spec.scheme == "open_clip" or is_model_folder(args.checkpoint):
        for option in ("image_encoder", "text_only"):
            if getattr(args, option):
                raise UsageError(f"--{option.replace('_', '-')}", "is for a `vlr train` checkpoint of a BLIP text "
                                                                  "encoder; this export carries its own image side")
    if spec.scheme == "open_clip":  # an open_clip / Long-CLIP checkpoint -> an open_clip Hub folder
        return _export_open_clip(args, spec)
    if is_model_folder(args.checkpoint):  # an MLLM / LLM folder: the EOL-embedder family (CaRe, E5-V)
        return run_eol_export(args)
    for option in ("prompt", "config", "recipe"):
        if getattr(args, option) is not None:
            raise UsageError(f"--{option}", "is for an MLLM folder (CaRe, E5-V); CHECKPOINT is a `vlr train` .pth")
    if args.image_encoder is not None and args.text_only:
        raise UsageError("--image-encoder", "and --text-only exclude each other")

    # the output, the checkpoint and the --eval files are checked before the model is loaded
    check_output_dir(args.out, "OUT", replaced_whole=True)
    check_export_target(args.out, overwrite=args.overwrite, flag="--overwrite")
    meta = text_encoder_meta(args.checkpoint)
    merge_eval_results(args.eval)
    encoder = load_checked_text_encoder(args.checkpoint, "CHECKPOINT")
    tower = None
    if "vlr_video_encoder" in meta and type(encoder).__name__ == "DualCLSTextEncoder":  # an MVC run
        from vlr_plugins.hf.mvc_video import checkpoint_video_tower

        tower = checkpoint_video_tower(parse_model_spec(args.checkpoint, "text").text, encoder)
    tokenizer = load_text_tokenizer(args.tokenizer, encoder, args.checkpoint)
    towers = _image_side(args, meta, encoder)
    name = args.name or os.path.basename(os.path.normpath(args.out))
    extra = card_files(meta, model_name=name, repo_id=args.repo_id, eval_paths=args.eval, license=args.license,
                       image_side=towers.get("image_embedding_space"))
    if "README.md" not in extra:
        print("no recipe recorded with this model: no model card written", file=sys.stderr)
    out = export_text_encoder(encoder, args.out, tokenizer=tokenizer, recipe=meta.get("vlr_recipe"),
                              remote_code=not args.no_remote_code, overwrite=args.overwrite, extra_files=extra,
                              video_tower=tower, **towers)
    print(f"exported to {out}" + (" (with its video tower and video processor)" if tower is not None else "")
          + (" (with model card)" if "README.md" in extra else ""))
    return 0


def _image_side(args: argparse.Namespace, meta: dict[str, Any], encoder: Any) -> dict[str, Any]:
    """``export_text_encoder``'s image-side arguments for a BLIP text encoder (the frozen side
    it was aligned to, :mod:`vlr_plugins.hf.image_side`); none for the other encoders."""
    from vlr_plugins.hf.image_side import find_image_side, load_image_side

    if type(encoder).__name__ != "BlipTextEncoder":
        if args.image_encoder is not None:
            raise UsageError("--image-encoder", f"is for a BLIP text encoder; {args.checkpoint} holds a "
                                                f"{type(encoder).__name__}")
        return {}
    side = find_image_side(meta, encoder, image_encoder=args.image_encoder, text_only=args.text_only)
    print(side.source, file=sys.stderr)
    if side.model is None:
        return {"image_embedding_space": side.space}
    image_side, processor = load_image_side(side, encoder.embed_dim)
    return {"image_side": image_side, "image_processor": processor, "image_embedding_space": side.space}


def _export_open_clip(args: argparse.Namespace, spec: Any) -> int:
    from vlr_plugins._io import check_output_dir
    from vlr_plugins.integrations.open_clip.export import export_open_clip

    from vlr_plugins.hf.card import merge_eval_results

    for option in ("prompt", "config", "recipe", "tokenizer"):
        if getattr(args, option) is not None:
            raise UsageError(f"--{option.replace('_', '-')}", "is not for an open_clip checkpoint (its folder "
                                                                "carries open_clip's own config and tokenizer)")
    check_output_dir(args.out, "OUT", replaced_whole=True)
    merge_eval_results(args.eval)  # the --eval files are checked before the model is loaded
    st = not args.no_remote_code  # the sentence-transformers module is the folder's only code
    card = {"model_name": args.name or os.path.basename(os.path.normpath(args.out)), "repo_id": args.repo_id,
            "eval_paths": args.eval, "license": args.license}
    out = export_open_clip(*spec.open_clip_parts, args.out, spec=spec.text, overwrite=args.overwrite,
                           sentence_transformers=st, card=card)
    also = f"; sentence-transformers: SentenceTransformer({str(out)!r}, trust_remote_code=True)" if st else ""
    print(f"exported to {out} (with model card; open_clip: create_model_from_pretrained('local-dir:{out}'){also})")
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    from vlr_plugins.hf.push import cmd_push as push

    return push(args)


def add_export_cli(sub: Any) -> None:
    """Add ``vlr export`` to the ``vlr`` command's subparsers."""
    s = sub.add_parser("export", help="a trained checkpoint -> a Hub-ready transformers folder with a model card")
    s.add_argument("checkpoint", metavar="CHECKPOINT",
                   help="a `vlr train` checkpoint (.pth), blip:<hub name or folder>, an MLLM / LLM transformers "
                        "folder (CaRe, E5-V: exported as an EOL embedder, docs/care.md), or "
                        "open_clip:MODEL:CHECKPOINT or open_clip:local-dir:DIR:CHECKPOINT (`vlr openclip-train`: "
                        "exported as an open_clip Hub folder)")
    s.add_argument("out", metavar="OUT",
                   help="the folder to write (config.json, model.safetensors, code, tokenizer, README.md)")
    s.add_argument("--eval", nargs="*", metavar="RESULTS_JSON", help="`vlr eval` results to put in the card")
    s.add_argument("--name", help="model name in the card (default: the folder name)")
    s.add_argument("--repo-id", help="Hub id used in the card's usage example")
    s.add_argument("--license", help="license id for the card metadata")
    s.add_argument("--tokenizer", help="default: the encoder's")
    s.add_argument("--image-encoder", metavar="blip:NAME",
                   help="BLIP checkpoint: the frozen image side to bundle (default: the encoder of the store the "
                        "recipe trained against, else the BLIP model the text encoder started from)")
    s.add_argument("--text-only", action="store_true",
                   help="BLIP checkpoint: export the text side alone (no image tower)")
    s.add_argument("--no-remote-code", action="store_true",
                   help="do not ship modeling code (loading then needs `import vlr_plugins.hf`; an open_clip "
                        "folder is then without its sentence-transformers module)")
    s.add_argument("--overwrite", action="store_true", help="replace an earlier export at OUT")
    s.add_argument("--prompt", help="MLLM folder: the EOL prompt family or YAML file (default: care)")
    s.add_argument("--config", help="MLLM folder: the MMEngine config of the run, for the card's recipe table")
    s.add_argument("--recipe", help="MLLM folder: the recipe name to record (default: the config's vlr.name)")
    s.set_defaults(fn=cmd_export)


def add_push_cli(sub: Any) -> None:
    """Add ``vlr push`` to the ``vlr`` command's subparsers."""
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
