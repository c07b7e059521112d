"""Training configs pickled beside the weights, read as plain dicts without running the file.

Released video checkpoints carry their run's config as a Python object, so plain
``torch.load(weights_only=True)`` refuses them:

- UMT's video-text trainer (OpenGVLab/unmasked_teacher, ``multi_modality/tasks/*.py``)
  saves ``{"model", "optimizer", "scheduler", "scaler", "config", "epoch", "global_step"}``
  with ``config`` its own ``utils.easydict.EasyDict``; SMILE's video-text trainer
  (fmthoker/SMILE, ``tasks/*.py``) the same with PyPI's ``easydict.EasyDict``;
- VideoMAE-code trainers (UMT single-modality, SMILE pre-training and fine-tuning,
  ``utils.save_model``) save ``{"model", "optimizer", "epoch", "scaler", "args"}`` with
  ``args`` an ``argparse.Namespace``.

:func:`torch_load_weights_only` reads them with torch's weights-only unpickler all the same.
For the load, each name of :data:`CONFIG_CLASSES` is allow-listed
(``torch.serialization.safe_globals`` takes ``(object, "module.Name")``) but bound to a
stand-in, never to the class: no module the file names is imported and none of its code
runs. The stand-in builds an empty ``OrderedDict``, which the unpickler fills the way it
fills any ``OrderedDict`` (the dict's items, and the object's attributes, which torch sets on
an ``OrderedDict`` as its ``__dict__``); afterwards each becomes a plain ``dict`` of its
items and attributes, nested configs too. A file naming any other class or function is
refused by torch as before.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import pickle
import threading
from collections import OrderedDict
from typing import Any

__all__ = ["CONFIG_CLASSES", "torch_load_weights_only"]

#: the config classes read as plain dicts, as their files name them (module.qualname)
CONFIG_CLASSES = (
    "easydict.EasyDict",        # PyPI easydict: SMILE's video-text trainer, ViCLIP
    "utils.easydict.EasyDict",  # UMT's (and InternVideo's) own copy, multi_modality/utils/easydict.py
    "argparse.Namespace",       # VideoMAE-code trainers' `args` (UMT single-modality, SMILE)
)

# the OrderedDicts the stand-ins made in the load under way (None: no load of ours is)
_made: contextvars.ContextVar[list[OrderedDict] | None] = contextvars.ContextVar("vlr_configs_made", default=None)


def _stand_in(name: str) -> type:
    """A class the unpickler may instantiate in ``name``'s place: its ``__new__`` returns an
    empty ``OrderedDict`` (pickle's NEWOBJ calls ``cls.__new__(cls)``; ``__init__`` never runs
    on a result that is no instance of the class)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> OrderedDict:
        made = _made.get()
        if made is None:  # another thread's torch.load while ours allow-lists the name
            raise pickle.UnpicklingError(f"Unsupported global: GLOBAL {name} was not an allowed global")
        if args or kwargs:  # torch.save (protocol 2) builds these with no arguments; nothing else is read
            raise pickle.UnpicklingError(f"Unsupported class: GLOBAL {name} built with arguments")
        made.append(OrderedDict())
        return made[-1]

    qualname = name.rpartition(".")[2]
    return type(f"_ConfigStandIn_{qualname}", (), {"__new__": __new__, "__module__": __name__,
                                                     "__doc__": f"reads a pickled {name} as a dict"})


_STAND_INS = [(_stand_in(name), name) for name in CONFIG_CLASSES]


def torch_load_weights_only(path: str | os.PathLike, *, mmap: bool = False) -> Any:
    """``torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)``, with the
    configs of :data:`CONFIG_CLASSES` read as plain (nested) dicts.

    Raises whatever ``torch.load`` raises (``pickle.UnpicklingError`` for a file naming any
    other Python object); callers turn that into their refusal.

    Example::

        >>> ckpt = torch_load_weights_only("umt/ckpt_best.pth")  # doctest: +SKIP
        >>> type(ckpt["config"]), ckpt["config"]["model"]["vision_encoder"]["name"]  # doctest: +SKIP
        (<class 'dict'>, 'vit_b16')
    """
    import torch

    made: list[OrderedDict] = []
    token = _made.set(made)
    try:
        with _allowed(torch):
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    finally:
        _made.reset(token)
    return _plain(obj, made) if made else obj


_lock = threading.Lock()
_held: list[Any] = []  # the entered safe_globals context, while loads of ours are under way
_loads = 0


@contextlib.contextmanager
def _allowed(torch: Any):
    """The stand-ins allow-listed while any load of ours is under way: torch's allow-list is one
    set for the process (``safe_globals`` adds on entry, removes on exit), so two threads
    loading at once must not take the names away from each other."""
    global _loads
    with _lock:
        if _loads == 0:
            _held.append(torch.serialization.safe_globals(_STAND_INS))
            _held[0].__enter__()
        _loads += 1
    try:
        yield
    finally:
        with _lock:
            _loads -= 1
            if _loads == 0:
                _held.pop().__exit__(None, None, None)


def _plain(root: Any, made: list[OrderedDict]) -> Any:
    """``root`` with every stand-in's ``OrderedDict`` replaced by a dict of its items and then
    its attributes (a ``Namespace`` has only attributes; an ``EasyDict`` holds each item as an
    attribute too), inside dicts, lists and tuples; shared objects stay shared."""
    made_ids = {id(o) for o in made}
    memo: dict[int, Any] = {}

    def walk(obj: Any) -> Any:
        key = id(obj)
        if key in memo:
            return memo[key]
        if key in made_ids:
            out: dict[Any, Any] = {}
            memo[key] = out
            # dict.items / vars: a key the file set as an attribute cannot stand in for a method
            for k, v in [*dict.items(obj), *vars(obj).items()]:
                if k not in out:
                    out[k] = walk(v)
            return out
        memo[key] = obj
        if isinstance(obj, dict):
            changed = [(k, new) for k, v in list(dict.items(obj)) if (new := walk(v)) is not v]
            for k, new in changed:
                obj[k] = new
        elif isinstance(obj, list):
            for i, v in enumerate(list(obj)):
                if (new := walk(v)) is not v:
                    obj[i] = new
        elif type(obj) is tuple:
            items = [walk(v) for v in obj]
            if any(new is not v for new, v in zip(items, obj)):
                memo[key] = tuple(items)
        return memo[key]

    return walk(root)
