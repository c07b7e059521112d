"""Pretrained pieces named by a string -- a local folder or a Hugging Face Hub id -- loaded
with one clear error when they cannot be had.

``transformers`` reads a name as a folder when one exists and as a Hub id otherwise, so a
mistyped folder surfaces as a Hub error ("Repo id must use alphanumeric chars...") and an
offline machine as a connection error. Here a name that can only be a folder
(:func:`looks_local`) and is missing is reported as a missing folder, and every other
failure as one :class:`~vlr_plugins.errors.ModelLoadError` naming the setting to change
and the offline-use doc (:func:`~vlr_plugins.errors.loading_pretrained`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from vlr_plugins.errors import OFFLINE_DOC, MissingFileError, ModelLoadError, loading_pretrained

__all__ = ["looks_local", "check_local_folder", "load_tokenizer"]

# what a Hub id may be: "name" or "namespace/name" of these characters
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
#: files of a saved tokenizer, one of which ``save_pretrained`` always writes
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json", "vocab.txt")


def looks_local(name: str | os.PathLike) -> bool:
    """Whether ``name`` means a folder on this machine: it exists, it cannot be a Hub id
    (absolute, ``./``, ``~``, a third ``/``, characters a Hub id has not), or its first
    part is a folder here (``world/tokenizer`` beside a ``world/`` folder)."""
    text = os.fspath(name)
    if os.path.exists(text) or not _HUB_ID.match(text):
        return True
    head = text.split("/")[0]
    return "/" in text and os.path.isdir(head)


def check_local_folder(name: str | os.PathLike, setting: str) -> None:
    """Raise :class:`~vlr_plugins.errors.MissingFileError` naming ``setting`` when ``name``
    can only be a local folder and is not one."""
    text = os.fspath(name)
    if not looks_local(text):
        return
    if not os.path.exists(text):
        raise MissingFileError(f"{setting}: no such folder: {text} (a local folder, or a Hugging Face "
                               f"Hub id such as Salesforce/blip-itm-base-coco)")
    if not os.path.isdir(text):
        raise MissingFileError(f"{setting}: {text} is a file; expected a folder holding the model's or "
                               "tokenizer's files")


def load_tokenizer(name: str | os.PathLike, setting: str = "tokenizer") -> Any:
    """``AutoTokenizer.from_pretrained(name)``, with errors that name ``setting`` (the
    recipe key or option that chose ``name``, e.g. ``model.tokenizer`` or ``--tokenizer``).

    A local folder must hold a saved tokenizer (``tokenizer.save_pretrained(folder)``:
    one of :data:`TOKENIZER_FILES`); a Hub id must be reachable or cached
    (``HF_HUB_OFFLINE=1``). Raises :class:`~vlr_plugins.errors.MissingFileError` for a
    folder that is not there and :class:`~vlr_plugins.errors.ModelLoadError` for the rest.

    Example::

        tok = load_tokenizer("world/tokenizer", "--tokenizer")
    """
    from transformers import AutoTokenizer

    text = os.fspath(name)
    check_local_folder(text, setting)
    if os.path.isdir(text) and not any((Path(text) / f).is_file() for f in TOKENIZER_FILES):
        raise ModelLoadError(
            f"{setting}: {text} holds no tokenizer (expected one of {', '.join(TOKENIZER_FILES)}, as "
            f"tokenizer.save_pretrained(folder) writes); see {OFFLINE_DOC}")
    with loading_pretrained(text, setting):
        try:
            return AutoTokenizer.from_pretrained(text)
        except ValueError as e:  # files present but not a tokenizer transformers can build
            raise ModelLoadError(f"{setting}: cannot load the tokenizer in {text!r}: "
                                 f"{' '.join(str(e).split())[:300]}") from e
