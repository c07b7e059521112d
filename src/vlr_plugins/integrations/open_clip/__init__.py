"""OpenCLIP integration: the vlr losses, several texts per image and long text in
open_clip's own trainer (``open_clip_train``); ``docs/open_clip.md``.

Training: ``vlr openclip-train`` or ``python -m vlr_plugins.integrations.open_clip.train``.
Names are resolved on first use, so importing this package (e.g. for :func:`add_cli`)
imports neither open_clip nor open_clip_train. The long-context configs
(``ViT-B-16-ctx248`` ...) are registered with ``open_clip.add_model_config`` on first
use of any name here, or by :func:`register_long_context_configs`.
"""

from __future__ import annotations

import importlib
from typing import Any

from vlr_plugins.integrations.open_clip.cli import add_cli

_LAZY = {
    "TextBatch": "text_batch",
    "TextItem": "text_batch",
    "collate_text_batch": "text_batch",
    "TextBatchCLIP": "model",
    "OpenCLIPLoss": "loss",
    "build_openclip_loss": "loss",
    "SampleTokenizer": "dataset",
    "TextViewsImageDataset": "dataset",
    "first_sentence": "dataset",
    "read_image_text_samples": "dataset",
    "add_long_context_config": "long_context",
    "create_long_context_model": "long_context",
    "create_long_context_model_and_transforms": "long_context",
    "long_context_config": "long_context",
    "parse_long_context_name": "long_context",
    "register_long_context_configs": "long_context",
    "VLRTrainOptions": "patch",
    "patched_open_clip_train": "patch",
    "main": "train",
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


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    from vlr_plugins.integrations.open_clip.long_context import register_long_context_configs

    register_long_context_configs()
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
