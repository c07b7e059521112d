"""Model cards generated from the objects that trained a model and its `vlr eval` results.

Nothing is written by hand: the card's loss line comes from the trained loss object's
``get_config_dict()``, recorded in the checkpoint as ``meta['vlr_loss']`` (defaults the
recipe left out and a learned temperature included; see :mod:`vlr_plugins.checkpoint_meta`),
the rest of what was trained from the recipe recorded beside it (``meta['vlr_recipe']``),
and the results table and Hub ``model-index`` metadata from `vlr eval`'s JSON.
:func:`card_files` assembles all of it for ``vlr export``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from vlr_plugins._shipped import shipped_dirs
from vlr_plugins.data.text_views import TextView
from vlr_plugins.errors import DataFormatError, MissingFileError

__all__ = ["build_model_card", "write_model_card", "merge_eval_results", "card_files", "eval_result_entries",
           "METRIC_NAMES"]

METRIC_NAMES = {
    "i2t_r1": "I2T R@1", "i2t_r5": "I2T R@5", "i2t_r10": "I2T R@10",
    "t2i_r1": "T2I R@1", "t2i_r5": "T2I R@5", "t2i_r10": "T2I R@10",
}


def _architecture(encoder: Mapping[str, Any]) -> str:
    """How the card names the text encoder ``meta['vlr_text_encoder']`` describes."""
    if encoder.get("type") == "DualCLSTextEncoder":
        layers = (encoder.get("config") or {}).get("num_hidden_layers")
        fusion = encoder.get("num_fusion_layers")
        split = f" ({layers - fusion} text + {fusion} fusion layers)" if isinstance(layers, int) \
            and isinstance(fusion, int) else ""
        if encoder.get("dual_cls", True):
            return (f"a BERT text encoder{split} with one CLS token per caption view (`view=\"summary\"` or "
                    "`view=\"detailed\"`) + text projection")
        return f"a BERT text encoder{split} with a single CLS token + text projection"
    return "BLIP text encoder + text projection"


def eval_result_entries(recall: Mapping[str, Mapping[str, float]], *, task_type: str, task_name: str,
                        metric_config: Any = None, renorm: Mapping[str, Mapping[str, Any]] | None = None) -> list[Any]:
    """The Hub ``model-index`` entries (``huggingface_hub.EvalResult``) of `vlr eval` recalls
    ``{benchmark: {metric: value}}``: one per metric of :data:`METRIC_NAMES`, rounded to 2
    places; ``metric_config(benchmark)``, when given, says how each was measured. A benchmark
    scored with re-normalised scores (``renorm[benchmark]``, `vlr eval --renorm`) says so in
    its metric names and configs, so no re-normalised number passes for a plain one."""
    from huggingface_hub import EvalResult

    from vlr_plugins.eval.query_bank import renorm_sentence

    renorm = renorm or {}

    def config(bench: str) -> dict:
        parts = [metric_config(bench)] if metric_config is not None else []
        parts += [renorm_sentence(renorm[bench])] if renorm.get(bench) else []
        return {"metric_config": "; ".join(parts)} if parts else {}

    def name(bench: str, metric: str) -> str:
        method = (renorm.get(bench) or {}).get("method")
        return METRIC_NAMES[metric] + (f" ({_RENORM_NAMES.get(method, method)})" if method else "")

    return [
        EvalResult(task_type=task_type, task_name=task_name, dataset_type=bench.split("/")[0], dataset_name=bench,
                   metric_type=metric.replace("_", "-"), metric_name=name(bench, metric),
                   metric_value=round(float(value), 2), **config(bench))
        for bench, metrics in recall.items() for metric, value in metrics.items() if metric in METRIC_NAMES
    ]


_RENORM_NAMES = {"dsl": "DSL", "qbnorm": "QB-Norm"}


def renorm_notes(renorm: Mapping[str, Mapping[str, Any]] | None) -> str:
    """Lines under a card's results table naming each re-normalised benchmark's method."""
    from vlr_plugins.eval.query_bank import renorm_sentence

    return "".join(f"\n{bench}: {renorm_sentence(record)}\n" for bench, record in (renorm or {}).items() if record)


def _template(name: str) -> str:
    for root in shipped_dirs("model_cards"):
        path = root / name
        if path.is_file():
            return str(path)
    raise FileNotFoundError(f"model card template {name!r} not found in {shipped_dirs('model_cards')}")


def _views(views: list[Mapping[str, Any]]) -> str:
    if not views:
        return "none"
    parts = []
    for raw in views:
        v = TextView(**raw)
        take = "all" if v.take == "all" else f"{v.take} {v.count}"
        named = f"{v.name}: " if v.name else ""
        parts.append(f"{named}{v.label} ({take}, {v.max_tokens} tokens)")
    return "; ".join(parts)


def _value(value: Any) -> str:
    # a learned temperature is a float32 read back as float64: 4 significant digits suffice
    return repr(float(f"{value:.4g}")) if isinstance(value, float) else str(value)


def _loss_line(loss: Mapping[str, Any]) -> str:
    rest = {k: v for k, v in loss.items() if k != "type"}
    return f"{loss['type']}({', '.join(f'{k}={_value(v)}' for k, v in rest.items())})"


def build_model_card(
    recipe: Mapping[str, Any],
    *,
    model_name: str,
    loss: Mapping[str, Any] | None = None,
    repo_id: str | None = None,
    eval_results: Mapping[str, Any] | None = None,
    architecture: str = "BLIP text encoder + text projection",
    image_space: str | None = None,
    embed_dim: int | None = None,
    license: str | None = None,
    template: str = "text_encoder.md",
    image_tower: bool = False,
    image_encoder: str | None = None,
    video_tower: bool = False,
):
    """A ``huggingface_hub.ModelCard`` for a model trained with ``recipe`` (``Recipe.to_dict()``).

    ``loss``: the configuration of the loss object that trained the model (``meta['vlr_loss']``,
    see :func:`vlr_plugins.checkpoint_meta.loss_config`); without it the card shows the
    recipe's ``loss`` mapping as written and says that defaults and a learned temperature
    are missing from it.
    ``eval_results``: the JSON `vlr eval` writes (``{"recall": {bench: metrics}, "budgets": ...}``);
    each recall becomes an ``EvalResult`` in the card's ``model-index``.
    ``image_tower``: the export bundles its frozen image side (the "Use" section retrieves with
    both towers); else ``image_encoder`` names the encoder that made its image embeddings.
    ``video_tower``: the export bundles the video tower trained with the text encoder (an MVC
    export): the card's "Use" retrieves videos with it.
    """
    from huggingface_hub import ModelCard, ModelCardData

    from vlr_plugins.eval.report import recall_table_markdown

    video = (recipe.get("data") or {}).get("schema") == "mvc"  # video-text pretraining: both towers trained
    recall = dict((eval_results or {}).get("recall") or {})
    budgets = (eval_results or {}).get("budgets", {})
    renorm = (eval_results or {}).get("renorm")
    results = eval_result_entries(recall, task_type="video-text-retrieval" if video else "image-text-retrieval",
                                  task_name="Video-text retrieval" if video else "Image-text retrieval",
                                  metric_config=lambda bench: f"{budgets.get(bench, '?')} tokens", renorm=renorm)
    views = recipe["text_views"]
    budgets = {TextView(**v).key: v["max_tokens"] for v in (*views["positives"], *views["negatives"])}
    base = recipe["model"].get("pretrained")
    data = ModelCardData(
        library_name="transformers", license=license, base_model=base or None,
        tags=["vlr-plugins", "video-text-retrieval" if video else "image-text-retrieval", "feature-extraction",
              f"recipe-{recipe['name']}"],
        model_name=model_name, eval_results=results or None, pipeline_tag="feature-extraction",
    )
    card = ModelCard.from_template(
        data,
        template_path=_template(template),
        model_name=model_name,
        repo_id=repo_id or model_name,
        recipe=recipe,
        loss_line=_loss_line(loss if loss is not None else recipe["loss"]),
        loss_from_recipe=loss is None,
        positives=_views(list(views["positives"])),
        negatives=_views(list(views["negatives"])),
        architecture=architecture,
        image_space=image_space,
        video=video,
        image_tower=image_tower,
        image_encoder=image_encoder,
        video_tower=video and video_tower,
        embed_dim=embed_dim if embed_dim is not None else "D",
        default_max_tokens=max(budgets.values()),
        budgets_line=", ".join(f"{k} {v}" for k, v in budgets.items()),
        results_table=recall_table_markdown({model_name: recall}, list(recall),
                                            ("i2t_r1", "i2t_r5", "t2i_r1", "t2i_r5")) + renorm_notes(renorm)
        if recall else "",
    )
    return card


def write_model_card(card, folder: str | os.PathLike) -> str:
    """Write ``README.md`` into ``folder`` atomically."""
    from vlr_plugins._io import atomic_write_text

    path = os.path.join(folder, "README.md")
    atomic_write_text(path, str(card))
    return path


def merge_eval_results(paths: Sequence[str | os.PathLike] | None) -> dict[str, Any]:
    """Several `vlr eval` ``results.json`` of one model merged (later files win per benchmark):
    ``{"recall": {bench: metrics}, "budgets": {bench: n}}``, and ``"renorm": {bench: record}`` for
    benchmarks scored with re-normalised scores (`vlr eval --renorm`)."""
    merged: dict[str, Any] = {"recall": {}, "budgets": {}, "renorm": {}}
    from vlr_plugins.data._text_files import read_utf8

    for path in paths or []:
        if not os.path.isfile(path):
            what = "a folder: give its results.json" if os.path.isdir(path) else "not there"
            raise MissingFileError(f"no `vlr eval` results at {path}: it is {what}")
        try:
            result = json.loads(read_utf8(path))
        except json.JSONDecodeError as e:
            raise DataFormatError(path, f"not valid JSON: {e.msg}", record=e.lineno) from None
        if not isinstance(result, dict) or not isinstance(result.get("recall"), dict):
            raise DataFormatError(path, "expected the results.json of `vlr eval` (a 'recall' mapping)")
        recall = {}
        for bench, metrics in result["recall"].items():
            if isinstance(metrics, dict) and isinstance(metrics.get("renorm"), dict):  # `vlr eval --renorm`
                merged["renorm"][bench] = metrics["renorm"]
                metrics = {k: v for k, v in metrics.items() if k != "renorm"}
            else:
                merged["renorm"].pop(bench, None)
            if not isinstance(metrics, dict) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in metrics.values()):
                raise DataFormatError(path, "expected a mapping of metric names to numbers, as `vlr eval` writes",
                                      field=f"recall.{bench}")
            recall[bench] = metrics
        if not isinstance(result.get("budgets") or {}, dict):
            raise DataFormatError(path, "expected a mapping of benchmark names to token budgets", field="budgets")
        merged["recall"].update(recall)
        merged["budgets"].update(result.get("budgets") or {})
    if not merged["renorm"]:  # only `vlr eval --renorm` results carry one
        del merged["renorm"]
    return merged


def _space_line(space: Mapping[str, Any] | None) -> str | None:
    """How the card names the image-embedding space: BLIP's model and projection, or the encoder."""
    space = space or {}
    if space.get("model"):
        return f"`{space['model']}`, `{space.get('projection', 'vision_proj')}` of its ViT's [CLS] state, unit norm"
    return f"made by `{space['encoder']}`" if space.get("encoder") else None


def card_files(
    meta: Mapping[str, Any],
    *,
    model_name: str,
    repo_id: str | None = None,
    eval_paths: Sequence[str | os.PathLike] | None = None,
    license: str | None = None,
    image_side: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The files ``vlr export`` adds to an export folder, from a checkpoint's ``meta``
    (:func:`vlr_plugins.checkpoint_meta.read_checkpoint_meta`) and `vlr eval` results files.

    ``README.md``: the model card, when the checkpoint records its recipe
    (``meta['vlr_recipe']``; the loss line from ``meta['vlr_loss']`` when recorded);
    ``eval_results.json``: the merged results (:func:`merge_eval_results`), when
    ``eval_paths`` names any. Pass the result as ``export_text_encoder(extra_files=...)``.
    ``image_side``: the ``image_embedding_space`` the export records; its ``model`` set when
    the image side is bundled (:mod:`vlr_plugins.hf.image_side`).
    """
    evals = merge_eval_results(eval_paths)
    files = {"eval_results.json": json.dumps(evals, indent=2) + "\n"} if eval_paths else {}
    recipe = meta.get("vlr_recipe")
    if recipe is not None:
        encoder = meta.get("vlr_text_encoder") or {}
        card = build_model_card(recipe, model_name=model_name, loss=meta.get("vlr_loss"), repo_id=repo_id,
                                eval_results=evals, embed_dim=encoder.get("embed_dim"), license=license,
                                architecture=_architecture(encoder),
                                image_space=_space_line(image_side),
                                image_tower=bool((image_side or {}).get("model")),
                                image_encoder=(image_side or {}).get("encoder"),
                                video_tower=isinstance(meta.get("vlr_video_encoder"), Mapping))
        files["README.md"] = str(card)
    return files
