"""The model card of an exported MLLM embedder: from the run's recipe, the export's settings and `vlr eval` results.

As for the text encoders (:mod:`vlr_plugins.hf.card`), nothing is written by hand: the
"what was trained" table comes from the MMEngine config that trained the model
(:func:`recipe_rows`: its ``vlr`` block, model, loss, optimiser, schedule, data), the
prompt and clip settings from the export's ``vlr_eol`` block, the results from
`vlr eval`'s ``results.json`` (and, with a CapST result, CaRe's unified score).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from vlr_plugins.hf.card import METRIC_NAMES, _template, eval_result_entries, merge_eval_results, renorm_notes

__all__ = ["build_eol_model_card", "eol_card_files", "recipe_rows"]


def _get(node: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _call(cfg: Mapping[str, Any] | None) -> str:
    """``{type: X, a: 1}`` -> ``X(a=1)``."""
    if not isinstance(cfg, Mapping):
        return str(cfg)
    args = ", ".join(f"{k}={v}" for k, v in cfg.items() if k != "type")
    return f"{cfg.get('type', '?')}({args})"


def recipe_rows(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The card's "what was trained" rows from a CaRe / E5-V MMEngine config (``Config.to_dict()``):
    only what the config holds is shown."""
    vlr = config.get("vlr") or {}
    model = config.get("model") or {}
    rows: list[tuple[str, str]] = []

    def add(label: str, value: Any) -> None:
        if value not in (None, "", {}, []):
            rows.append((label, str(value)))

    add("recipe", vlr.get("name"))
    add("stage", vlr.get("stage"))
    add("model", model.get("type"))
    add("base", _get(model, "embedder.pretrained"))
    finetune = model.get("finetune")
    if finetune == "lora":
        lora = model.get("lora") or {}
        finetune = f"LoRA (r {lora.get('r', 64)}, alpha {lora.get('lora_alpha', 16)})"
    add("fine-tuning", finetune and f"{finetune}, vision tower {'frozen' if model.get('freeze_vision', True) else 'trained'}")
    if model.get("loss"):
        add("loss", f"`{_call(model['loss'])}`")
    add("prompt", _get(config, "train_dataloader.dataset.prompt") or _get(model, "embedder.prompt"))
    data = _get(config, "train_dataloader.dataset") or {}
    add("training data", data.get("type"))
    video = data.get("video_input") or {}
    if video:
        add("frames", f"{video.get('num_frames')} ({video.get('strategy', 'uniform')}), max pixels "
                      f"{video.get('max_pixels')}")
    optim = _get(config, "optim_wrapper.optimizer") or {}
    if optim:
        add("optimiser", f"{optim.get('type')}, lr {optim.get('lr')}, weight decay {optim.get('weight_decay', 0.0)}")
    add("batch (global)", vlr.get("global_batch"))
    train = config.get("train_cfg") or {}
    add("epochs", train.get("max_epochs"))
    add("iterations", train.get("max_iters"))
    return rows


def _results(eval_results: Mapping[str, Any]) -> tuple[list[Any], str]:
    recall = dict(eval_results.get("recall") or {})
    results = eval_result_entries(recall, task_type="text-to-video-retrieval", task_name="Text-video retrieval",
                                  renorm=eval_results.get("renorm"))
    if not recall:
        return results, ""
    metrics = ("t2i_r1", "t2i_r5", "t2i_r10", "i2t_r1", "i2t_r5", "i2t_r10")
    head = ["benchmark"] + [METRIC_NAMES[m].replace("I2T", "V2T").replace("T2I", "T2V") for m in metrics]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for bench, values in recall.items():
        lines.append("| " + " | ".join([bench] + [f"{values[m]:.1f}" if m in values else "—" for m in metrics]) + " |")
    return results, "\n".join(lines) + "\n" + renorm_notes(eval_results.get("renorm"))


def build_eol_model_card(settings: Mapping[str, Any], *, model_name: str, embed_dim: int | None = None,
                         config: Mapping[str, Any] | None = None, repo_id: str | None = None,
                         eval_results: Mapping[str, Any] | None = None, unified: Mapping[str, float] | None = None,
                         license: str | None = None):
    """A ``huggingface_hub.ModelCard`` for an export with ``vlr_eol`` block ``settings``.

    ``config``: the MMEngine config that trained it (``Config.to_dict()``; :func:`recipe_rows`);
    ``eval_results``: `vlr eval`'s JSON (recalls become the card's ``model-index``);
    ``unified``: :func:`~vlr_plugins.eval.capst.unified_score`'s result.
    """
    from huggingface_hub import ModelCard, ModelCardData

    config = dict(config or {})
    vlr = config.get("vlr") or {}
    adapter = bool(settings.get("adapter"))
    base = settings.get("base_model") or _get(config, "model.embedder.pretrained")
    results, table = _results(eval_results or {})
    recipe_name = vlr.get("name") or settings.get("recipe")
    tags = ["vlr-plugins", "feature-extraction", "video-text-retrieval", "sentence-transformers", "eol-embeddings"]
    if recipe_name:
        tags.append(f"recipe-{str(recipe_name).replace(' ', '-')}")
    data = ModelCardData(library_name="peft" if adapter else "transformers", license=license,
                         base_model=base or None, tags=tags, model_name=model_name,
                         eval_results=results or None, pipeline_tag="feature-extraction")
    text_prompt = (settings.get("prompt") or {}).get("text") or ""
    return ModelCard.from_template(
        data, template_path=_template("eol_embedder.md"), model_name=model_name, repo_id=repo_id or model_name,
        recipe={"name": recipe_name, "description": vlr.get("description")}, recipe_rows=recipe_rows(config),
        settings=settings, adapter=adapter, base_model=base, embed_dim=embed_dim if embed_dim is not None else "D",
        text_prompt_line=text_prompt.replace("\n", " "), results_table=table, unified=unified)


def eol_card_files(settings: Mapping[str, Any], *, model_name: str, embed_dim: int | None = None,
                   config: Mapping[str, Any] | None = None, repo_id: str | None = None,
                   eval_paths: Sequence[str | os.PathLike[str]] | None = None,
                   unified: Mapping[str, float] | None = None, license: str | None = None) -> dict[str, str]:
    """``README.md`` (and ``eval_results.json`` when ``eval_paths`` names `vlr eval` results)
    for ``export_eol_embedder(extra_files=...)``."""
    evals = merge_eval_results(eval_paths)
    files = {"eval_results.json": json.dumps(evals, indent=2) + "\n"} if eval_paths else {}
    card = build_eol_model_card(settings, model_name=model_name, embed_dim=embed_dim, config=config,
                                repo_id=repo_id, eval_results=evals, unified=unified, license=license)
    files["README.md"] = str(card)
    return files
