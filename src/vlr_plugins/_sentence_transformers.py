"""The files every export writes to be a sentence-transformers (>= 6) model, whatever its modules.

Each export kind (two-tower ``hf.sentence_transformers_towers``, EOL ``hf.sentence_transformers_eol``,
open_clip ``integrations.open_clip.export``) chooses its modules; the model-level config and
the JSON layout are one thing, written here. Imports only the standard library, so the
open_clip export needs no transformers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["MIN_VERSION", "json_files", "model_config"]

MIN_VERSION = ">=6.0"


def model_config(reason: str) -> dict[str, Any]:
    """``config_sentence_transformers.json``: cosine similarity, no prompts, and sentence-transformers
    ``MIN_VERSION`` required for ``reason``."""
    return {
        "model_type": "SentenceTransformer",
        "prompts": {},
        "default_prompt_name": None,
        "similarity_fn_name": "cosine",
        "requirements": {"sentence_transformers": {"specifier": MIN_VERSION, "reason": reason}},
    }


def json_files(files: Mapping[str, Any]) -> dict[str, str]:
    """``{relative path: JSON text}`` of ``{relative path: object}``, as the exports write them."""
    return {name: json.dumps(obj, indent=2) + "\n" for name, obj in files.items()}
