"""sentence-transformers files for an exported two-tower model (BLIP paragraph, MVC dual-CLS).

sentence-transformers (>= 6) loads such a folder through one ``Transformer`` module at its
root: ``modality_config`` routes each input kind to the model's own method (texts to
``get_text_features``, images to ``get_image_features``, videos to
``get_video_features``), whose unit-norm output is the sentence embedding as it is, with
no pooling or normalising module after it; the processor the folder carries (the
tokenizer, with a ``BlipProcessor`` when an image side is bundled) makes the inputs. So
``SentenceTransformer(folder, trust_remote_code=True).encode(texts)`` equals the model's
``get_text_features`` at the default token budget, and ``encode(images)`` its
``get_image_features``.
"""

from __future__ import annotations

from typing import Any

from vlr_plugins._sentence_transformers import json_files, model_config

__all__ = ["sentence_transformers_files"]

#: modality -> (the config flag that says the model has it, its method)
_TOWERS = {
    "image": ("has_image_tower", "get_image_features"),
    "video": ("has_video_tower", "get_video_features"),
}


def sentence_transformers_files(config: Any) -> dict[str, str]:
    """``{relative path: JSON text}`` for an export whose model has ``config`` (a vlr retrieval
    family config): ``modules.json`` (the Transformer at the root), ``sentence_bert_config.json``
    and ``config_sentence_transformers.json``. Texts are cut at ``config.max_tokens_for()``
    (the largest budget it was trained with)."""
    direct = {"method_output_name": None}
    modality_config: dict[str, Any] = {"text": {"method": "get_text_features", **direct}}
    for modality, (flag, method) in _TOWERS.items():
        if getattr(config, flag, False):
            modality_config[modality] = {"method": method, **direct}
    transformer = {
        "transformer_task": "feature-extraction",
        "modality_config": modality_config,
        "module_output_name": "sentence_embedding",
        "processing_kwargs": {"text": {"truncation": True, "max_length": config.max_tokens_for()}},
    }
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"}]
    reason = "the towers' own get_*_features methods are routed by modality_config (6.x)"
    return json_files({"modules.json": modules, "sentence_bert_config.json": transformer,
                       "config_sentence_transformers.json": model_config(reason)})
