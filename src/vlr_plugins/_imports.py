"""Python objects named ``module.sub:attr`` on a command line, imported the way ``python -m`` would."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

__all__ = ["current_folder_importable"]


@contextlib.contextmanager
def current_folder_importable() -> Iterator[None]:
    """The current folder first on ``sys.path`` for the block, as ``python -m`` puts it;
    the ``vlr`` script's own path starts with its bin folder instead."""
    here = os.getcwd()
    if "" in sys.path or here in sys.path:
        yield
        return
    sys.path.insert(0, here)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(here)
