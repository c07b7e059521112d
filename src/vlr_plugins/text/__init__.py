"""Text side: the BLIP text encoder, tokenizers and text-length extension.

Names are resolved on first use, so ``import vlr_plugins.text`` needs neither
``transformers`` nor ``tokenizers``.
"""

from __future__ import annotations

from typing import Any

from vlr_plugins.text.blip_text_encoder import BlipTextEncoder
from vlr_plugins.text.length import (
    extend_text_context,
    freeze_leading_rows,
    frozen_rows_param_groups,
    stretch_positional_embedding,
    tokenizer_for_length,
)
from vlr_plugins.text.load import load_text_encoder

__all__ = [
    "BlipTextEncoder",
    "build_wordpiece_tokenizer",
    "extend_text_context",
    "freeze_leading_rows",
    "frozen_rows_param_groups",
    "load_text_encoder",
    "stretch_positional_embedding",
    "tokenizer_for_length",
    "words_of",
]

_LAZY = {
    "build_wordpiece_tokenizer": "vlr_plugins.text.tokenizer",
    "words_of": "vlr_plugins.text.tokenizer",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
