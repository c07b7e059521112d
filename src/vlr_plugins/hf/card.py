"""Model cards generated from the recipe that trained a model and its `vlr eval` results.

Nothing is written by hand: the card's table, loss line and Hub ``model-index``
metadata come from the objects that produced the checkpoint.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from vlr_plugins._shipped import shipped_dirs

__all__ = ["build_model_card", "write_model_card", "METRIC_NAMES"]

METRIC_NAMES = {
    "i2t_r1": "I2T R@1", "i2t_r5": "I2T R@5", "i2t_r10": "I2T R@10",
    "t2i_r1": "T2I R@1", "t2i_r5": "T2I R@5", "t2i_r10": "T2I R@10",
}


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
    for v in views:
        take = "all" if v.get("take", "all") == "all" else f"{v['take']} {v['count']}"
        parts.append(f"{v['field']} ({take}, {v['max_tokens']} tokens)")
    return "; ".join(parts)


def build_model_card(
    recipe: Mapping[str, Any],
    *,
    model_name: str,
    repo_id: str | None = None,
    eval_results: Mapping[str, Any] | None = None,
    architecture: str = "BLIP text encoder + text projection",
    image_space: str | None = None,
    embed_dim: int | None = None,
    license: str | None = None,
    template: str = "text_encoder.md",
):
    """A ``huggingface_hub.ModelCard`` for a model trained with ``recipe`` (``Recipe.to_dict()``).

    ``eval_results``: the JSON `vlr eval` writes (``{"recall": {bench: metrics}, "budgets": ...}``);
    each recall becomes an ``EvalResult`` in the card's ``model-index``.
    """
    from huggingface_hub import EvalResult, ModelCard, ModelCardData

    from vlr_plugins.eval.report import recall_table_markdown

    recall = dict((eval_results or {}).get("recall") or {})
    results = [
        EvalResult(task_type="image-text-retrieval", task_name="Image-text retrieval",
                   dataset_type=bench.split("/")[0], dataset_name=bench, metric_type=metric.replace("_", "-"),
                   metric_name=METRIC_NAMES[metric], metric_value=round(float(value), 2),
                   metric_config=f"{(eval_results or {}).get('budgets', {}).get(bench, '?')} tokens")
        for bench, metrics in recall.items() for metric, value in metrics.items() if metric in METRIC_NAMES
    ]
    views = recipe["text_views"]
    budgets = {v["field"]: v["max_tokens"] for v in (*views["positives"], *views["negatives"])}
    base = recipe["model"].get("pretrained")
    data = ModelCardData(
        library_name="transformers", license=license, base_model=base or None,
        tags=["vlr-plugins", "image-text-retrieval", "feature-extraction", f"recipe-{recipe['name']}"],
        model_name=model_name, eval_results=results or None, pipeline_tag="feature-extraction",
    )
    loss = dict(recipe["loss"])
    loss_line = f"{loss.pop('type')}({', '.join(f'{k}={v}' for k, v in loss.items())})"
    card = ModelCard.from_template(
        data,
        template_path=_template(template),
        model_name=model_name,
        repo_id=repo_id or model_name,
        recipe=recipe,
        loss_line=loss_line,
        positives=_views(list(views["positives"])),
        negatives=_views(list(views["negatives"])),
        architecture=architecture,
        image_space=image_space,
        embed_dim=embed_dim if embed_dim is not None else "D",
        default_max_tokens=max(budgets.values()),
        budgets_line=", ".join(f"{k} {v}" for k, v in budgets.items()),
        results_table=recall_table_markdown({model_name: recall}, list(recall),
                                            ("i2t_r1", "i2t_r5", "t2i_r1", "t2i_r5")) if recall else "",
    )
    return card


def write_model_card(card, folder: str | os.PathLike) -> str:
    """Write ``README.md`` into ``folder`` atomically."""
    from vlr_plugins._io import atomic_write_text

    path = os.path.join(folder, "README.md")
    atomic_write_text(path, str(card))
    return path
