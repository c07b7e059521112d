"""The model card of an open_clip Hub folder (``vlr export open_clip:MODEL:CHECKPOINT OUT``).

An open_clip checkpoint records no recipe: the card names the architecture and its text
positions, shows retrieval with both towers through plain open_clip (and
sentence-transformers, where the folder carries its files), and carries the `vlr eval`
results given with ``--eval`` (as Hub ``model-index`` metadata too).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

__all__ = ["open_clip_card_files"]


def open_clip_card_files(model_name: str, *, architecture: str, context_length: int, embed_dim: int,
                         repo_id: str | None = None, eval_paths: Sequence[str | os.PathLike] | None = None,
                         license: str | None = None, long_context: bool = False,
                         sentence_transformers: bool = False) -> dict[str, str]:
    """``{"README.md": card, "eval_results.json": merged results (when eval_paths names any)}``."""
    from huggingface_hub import ModelCard, ModelCardData

    from vlr_plugins.eval.report import recall_table_markdown
    from vlr_plugins.hf.card import _template, eval_result_entries, merge_eval_results, renorm_notes

    evals = merge_eval_results(eval_paths)
    recall = dict(evals.get("recall") or {})
    results = eval_result_entries(recall, task_type="image-text-retrieval", task_name="Image-text retrieval",
                                  renorm=evals.get("renorm"))
    data = ModelCardData(library_name="open_clip", license=license, model_name=model_name,
                         tags=["vlr-plugins", "open_clip", "clip", "image-text-retrieval"],
                         pipeline_tag="zero-shot-image-classification", eval_results=results or None)
    card = ModelCard.from_template(
        data, template_path=_template("open_clip.md"), model_name=model_name, repo_id=repo_id or model_name,
        architecture=architecture, context_length=context_length, embed_dim=embed_dim,
        long_context=long_context, sentence_transformers=sentence_transformers,
        results_table=recall_table_markdown({model_name: recall}, list(recall),
                                            ("i2t_r1", "i2t_r5", "t2i_r1", "t2i_r5")) + renorm_notes(evals.get("renorm"))
        if recall else "")
    files = {"README.md": str(card)}
    if eval_paths:
        files["eval_results.json"] = json.dumps(evals, indent=2) + "\n"
    return files
