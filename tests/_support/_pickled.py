"""Checkpoint files whose pickles name classes and functions, for the tests of what vlr reads:

- :func:`saved_as`: ``torch.save`` with a class defined here pickled under another module's
  name (``utils.easydict.EasyDict`` as UMT's trainer pickles its config, ``mmengine.config.ConfigDict``),
  that module present in ``sys.modules`` only while saving, as in the trainer that wrote the file;
- :class:`AttrDict`: a dict that also holds each item as an attribute, which is how an
  ``EasyDict`` pickles (its items, then its ``__dict__``);
- :class:`Payload`: an object whose unpickling would run a command (``__reduce__``), and
  :func:`payloads`, the ways a file can ask for that; the command only creates a marker file,
  so a test sees whether it ran.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch


class AttrDict(dict):
    """Items readable as attributes, nested dicts converted: a dict that pickles as EasyDict does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for key, value in list(self.items()):
            self[key] = value

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(value, dict) and not isinstance(value, AttrDict):
            value = type(self)(value)
        elif isinstance(value, list):
            value = [type(self)(v) if isinstance(v, dict) and not isinstance(v, AttrDict) else v for v in value]
        super().__setitem__(key, value)
        if isinstance(key, str):
            self.__dict__[key] = value  # pickled as the object's state, after the items


@contextlib.contextmanager
def importable_as(cls: type, name: str) -> Iterator[type]:
    """``cls`` pickles as ``name`` (``module.Qualname``) inside the ``with``: the module (and its
    parent packages) exist in ``sys.modules`` only until it ends."""
    module, _, qualname = name.rpartition(".")
    old = (cls.__module__, cls.__qualname__)
    added = []
    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        dotted = ".".join(parts[:i])
        if dotted not in sys.modules:
            sys.modules[dotted] = types.ModuleType(dotted)
            added.append(dotted)
    missing = object()
    before = getattr(sys.modules[module], qualname, missing)  # a real module's own class comes back after
    setattr(sys.modules[module], qualname, cls)
    cls.__module__, cls.__qualname__ = module, qualname
    try:
        yield cls
    finally:
        cls.__module__, cls.__qualname__ = old
        if before is missing:
            delattr(sys.modules[module], qualname)
        else:
            setattr(sys.modules[module], qualname, before)
        for dotted in reversed(added):
            del sys.modules[dotted]


def saved_as(obj: Any, path: Path, names: dict[type, str], **save: Any) -> Path:
    """``torch.save(obj, path)`` with each class of ``names`` pickled under its name there."""
    with contextlib.ExitStack() as stack:
        for cls, name in names.items():
            stack.enter_context(importable_as(cls, name))
        torch.save(obj, path, **save)
    return path


class Payload:
    """Unpickling it calls ``call(*args)``: what a malicious checkpoint does (``__reduce__``)."""

    def __init__(self, call: Any, *args: Any) -> None:
        self.call, self.args = call, args

    def __reduce__(self):
        return self.call, self.args


def payloads(marker: Path) -> dict[str, Payload]:
    """Each way of asking the unpickler to run code, by the global torch's refusal names
    (protocol 2 writes ``subprocess`` by its Python 2 name, ``commands``; torch drops
    ``builtins.``); any of them running creates ``marker``."""
    script = f"open({str(marker)!r}, 'w').close()"
    return {
        "posix.system": Payload(os.system, f"touch {marker}"),
        "exec": Payload(builtins.exec, script),
        "eval": Payload(builtins.eval, f"__import__('pathlib').Path({str(marker)!r}).touch()"),
        "commands.run": Payload(subprocess.run, ["touch", str(marker)]),
    }
