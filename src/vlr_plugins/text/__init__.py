"""Text side: the BLIP text encoder and tokenizers.

Names are resolved on first use, so ``import vlr_plugins.text`` needs neither
``transformers`` nor ``tokenizers``.
"""

from __future__ import annotations

from typing import Any

from vlr_plugins.text.blip_text_encoder import BlipTextEncoder
from vlr_plugins.text.load import load_text_encoder

__all__ = ["BlipTextEncoder", "load_text_encoder", "build_wordpiece_tokenizer", "words_of"]

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
