"""Python objects named ``module.sub:attr`` on a command line, imported the way ``python -m`` would."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["current_folder_importable", "import_attr"]


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


def import_attr(module_name: str, attr: str, refuse: Callable[[str, type[Exception]], Exception]) -> Any:
    """``attr`` (may be dotted) of ``module_name``, imported with the current folder first.

    What cannot be had is raised as ``refuse(problem, kind)``: ``kind`` is ``ImportError``
    for a module that cannot be imported, ``AttributeError`` for a missing attribute, and
    ``problem`` says which, e.g. ``"my_encoders has no 'clip'"``.
    """
    try:
        with current_folder_importable():
            obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise refuse(f"cannot import {module_name!r}: {e} (searched the current folder {os.getcwd()} and the "
                     "installed packages)", ImportError) from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise refuse(f"{module_name} has no {attr!r}", AttributeError) from None
        obj = getattr(obj, part)
    return obj
