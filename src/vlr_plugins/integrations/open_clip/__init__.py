"""OpenCLIP integration: the vlr losses, several texts per image and long text in
open_clip's own trainer (``open_clip_train``); ``docs/open_clip.md``.

Training: ``vlr openclip-train`` or ``python -m vlr_plugins.integrations.open_clip.train``.
Names are resolved on first use, so importing this package (e.g. for :func:`add_cli`)
imports neither open_clip nor open_clip_train. The long-context configs
(``ViT-B-16-ctx248`` ...) are registered with ``open_clip.add_model_config`` on first
use of any name here, or by :func:`register_long_context_configs`.
"""

from __future__ import annotations

from vlr_plugins._lazy import lazy_exports
from vlr_plugins.integrations.open_clip.cli import add_cli

_LAZY = {
    "TextBatch": "vlr_plugins.integrations.open_clip.text_batch",
    "TextItem": "vlr_plugins.integrations.open_clip.text_batch",
    "collate_text_batch": "vlr_plugins.integrations.open_clip.text_batch",
    "TextBatchCLIP": "vlr_plugins.integrations.open_clip.model",
    "OpenCLIPLoss": "vlr_plugins.integrations.open_clip.loss",
    "build_openclip_loss": "vlr_plugins.integrations.open_clip.loss",
    "SampleTokenizer": "vlr_plugins.integrations.open_clip.dataset",
    "TextViewsImageDataset": "vlr_plugins.integrations.open_clip.dataset",
    "first_sentence": "vlr_plugins.integrations.open_clip.dataset",
    "read_image_text_samples": "vlr_plugins.integrations.open_clip.dataset",
    "add_long_context_config": "vlr_plugins.integrations.open_clip.long_context",
    "create_long_context_model": "vlr_plugins.integrations.open_clip.long_context",
    "create_long_context_model_and_transforms": "vlr_plugins.integrations.open_clip.long_context",
    "long_context_config": "vlr_plugins.integrations.open_clip.long_context",
    "parse_long_context_name": "vlr_plugins.integrations.open_clip.long_context",
    "register_long_context_configs": "vlr_plugins.integrations.open_clip.long_context",
    "VLRTrainOptions": "vlr_plugins.integrations.open_clip.patch",
    "patched_open_clip_train": "vlr_plugins.integrations.open_clip.patch",
    "main": "vlr_plugins.integrations.open_clip.train",
}

__all__ = [
    "OpenCLIPLoss",
    "SampleTokenizer",
    "TextBatch",
    "TextBatchCLIP",
    "TextItem",
    "TextViewsImageDataset",
    "VLRTrainOptions",
    "add_cli",
    "add_long_context_config",
    "build_openclip_loss",
    "collate_text_batch",
    "create_long_context_model",
    "create_long_context_model_and_transforms",
    "first_sentence",
    "long_context_config",
    "main",
    "parse_long_context_name",
    "patched_open_clip_train",
    "read_image_text_samples",
    "register_long_context_configs",
]


def _register_configs() -> None:
    from vlr_plugins.integrations.open_clip.long_context import register_long_context_configs

    register_long_context_configs()


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__, on_load=_register_configs)
