"""``vlr export`` for the MLLM family: a transformers MLLM (or LLM) folder -> an EOL-embedder export.

A CaRe / E5-V model after training is a transformers folder (``EOLContrastiveModel.merge_lora()``
then ``save_pretrained``, or a stage-I folder); ``vlr export FOLDER OUT`` writes it as
:func:`~vlr_plugins.hf.export_eol_embedder` does (full weights, ``modeling_vlr_eol.py``,
sentence-transformers files) with a model card (:func:`~vlr_plugins.hf.eol_card.eol_card_files`):
the EOL prompts and clip settings, the run's MMEngine config when ``--config`` names it,
``vlr eval`` results from ``--eval``, and CaRe's unified score when a results file holds one
(``vlr eval --capst``).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

__all__ = ["is_model_folder", "run_eol_export"]


def is_model_folder(path: str | os.PathLike[str]) -> bool:
    """``path`` is a folder with a transformers ``config.json`` (not a `vlr train` ``.pth``)."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, "config.json"))


def _unified(paths: list[str]) -> dict[str, float] | None:
    """The unified score of the last results file that holds one (``vlr eval --capst``)."""
    found = None
    for path in paths:
        with open(path, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError:
                continue  # merge_eval_results has refused it already, naming the line
        if isinstance(data, dict) and isinstance(data.get("unified"), dict):
            found = {k: data["unified"][k] for k in ("avg_r1", "avg_f1", "unified") if k in data["unified"]}
    return found


def _config(path: str | None) -> dict[str, Any] | None:
    if path is None:
        return None
    from vlr_plugins.errors import UsageError

    if not os.path.isfile(path):
        raise UsageError("--config", f"no such file: {path}")
    from mmengine.config import Config

    return Config.fromfile(path).to_dict()


def run_eol_export(args: argparse.Namespace) -> int:
    """``vlr export FOLDER OUT`` where FOLDER is a transformers model folder (see the module docstring)."""
    from vlr_plugins._io import check_output_dir
    from vlr_plugins.errors import UsageError
    from vlr_plugins.hf.card import merge_eval_results
    from vlr_plugins.hf.eol_card import eol_card_files
    from vlr_plugins.hf.export import check_export_target
    from vlr_plugins.hf.export_eol import eol_settings, export_eol_embedder
    from vlr_plugins.mllm.loading import load_eol_embedder

    if args.no_remote_code:
        raise UsageError("--no-remote-code", "an MLLM export is loaded through its remote code (AutoModel "
                                             "gives the embedding model); it cannot be left out")
    if args.tokenizer is not None:
        raise UsageError("--tokenizer", "an MLLM folder brings its own processor")
    check_output_dir(args.out, "OUT", replaced_whole=True)
    check_export_target(args.out, overwrite=args.overwrite, flag="--overwrite")
    evals = list(args.eval or [])
    merge_eval_results(evals)  # every results file checked before the model is loaded
    config = _config(args.config)
    name = args.name or os.path.basename(os.path.normpath(args.out))
    embedder = load_eol_embedder(args.checkpoint, prompt=args.prompt, setting="CHECKPOINT")
    recipe = args.recipe or ((config or {}).get("vlr") or {}).get("name")
    settings = eol_settings(embedder, recipe=recipe)
    files = eol_card_files(settings, model_name=name, embed_dim=embedder.embedding_dim, config=config,
                           repo_id=args.repo_id, eval_paths=evals or None, unified=_unified(evals),
                           license=args.license)
    out = export_eol_embedder(embedder, args.out, recipe=recipe, overwrite=args.overwrite, extra_files=files)
    print(f"exported to {out} (MLLM embedder, prompt {embedder.prompt.name!r}, with model card)")
    return 0
