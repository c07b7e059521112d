"""What a vlr text-encoder checkpoint records beside its weights (``meta``), for ``vlr export``.

``vlr train`` (``WeightsOnlyCheckpointHook``) and ``vlr lavis-export`` write:

- ``meta['vlr_text_encoder']``: the encoder's architecture (``vlr_plugins.specs.load_text_encoder``);
- ``meta['vlr_recipe']``: ``Recipe.to_dict()`` of the recipe it was trained with;
- ``meta['vlr_loss']``: :func:`loss_config` of the loss object as it was when saved, so a
  model card shows the defaults the recipe left out and a learned temperature.

Imports nothing heavy: both trainers' environments (transformers 4 for LAVIS, 5 for the
rest) write it.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from typing import Any

from vlr_plugins.errors import DataFormatError, MissingFileError
from vlr_plugins.pickled_configs import torch_load_weights_only

__all__ = ["check_text_encoder_checkpoint", "load_weights_only", "loss_config", "read_checkpoint_meta"]


def loss_config(loss: Any) -> dict[str, Any] | None:
    """``{"type": <registered name>, **loss.get_config_dict()}`` in plain JSON types, for
    ``meta['vlr_loss']``; ``None`` for a loss without ``get_config_dict``.

    Read it when the checkpoint is written, so a learnable temperature is the learned one;
    ``LOSSES.build(loss_config(loss))`` rebuilds the loss.

    Example::

        >>> loss_config(MultiPositiveInfoNCELoss(temperature=0.05))["variant"]  # doctest: +SKIP
        'mean_log'
    """
    from vlr_plugins.registry import LOSSES

    if not callable(getattr(loss, "get_config_dict", None)):
        return None
    name = next((e.name for e in LOSSES.entries() if e.obj is type(loss)), type(loss).__name__)
    return json.loads(json.dumps({"type": name, **loss.get_config_dict()}))


_REFUSED_OBJECT = re.compile(r"Unsupported global|GLOBAL |unrecognized function|Unsupported class")


def _not_weights_only(path: str, e: BaseException) -> str:
    found = re.search(r"GLOBAL ([\w.]+)", str(e))
    what = f" (e.g. {found.group(1)})" if found else ""
    return (f"not a weights-only checkpoint: it holds pickled Python objects{what} that only a full "
            "unpickle could rebuild; unpickling a file can run any code, so vlr reads checkpoints with "
            "torch.load(weights_only=True) only. Give a checkpoint `vlr train`, `vlr lavis-export` or "
            "LAVIS wrote, or re-save it with plain tensors, numbers, strings, lists and dicts")


def load_weights_only(path: str | os.PathLike, *, mmap: bool = False) -> Any:
    """``torch.load(path, weights_only=True)`` of a checkpoint a user named; every way that
    fails is one error naming the file.

    - no such file: :class:`~vlr_plugins.errors.MissingFileError`;
    - a folder, or a file ``torch.load`` cannot read (text, a truncated download, a
      ``.safetensors`` file): :class:`~vlr_plugins.errors.DataFormatError`;
    - a pickle of Python objects that ``weights_only`` refuses to rebuild: a
      ``DataFormatError`` saying why vlr never unpickles it (torch's own message suggests
      ``weights_only=False``, which runs whatever the file says).

    The training configs released UMT / SMILE checkpoints pickle beside their weights
    (``EasyDict``, ``argparse.Namespace``: :data:`vlr_plugins.pickled_configs.CONFIG_CLASSES`)
    come back as plain nested dicts, read without importing or running anything
    (:func:`vlr_plugins.pickled_configs.torch_load_weights_only`).

    ``mmap`` maps a checkpoint of the zip format (``torch.save``'s default) instead of
    reading it, for when only its metadata is wanted; older formats are read whole.

    Example::

        >>> ckpt = load_weights_only("work_dirs/c5/epoch_10.pth", mmap=True)  # doctest: +SKIP
        >>> ckpt["meta"]["vlr_text_encoder"]["type"]  # doctest: +SKIP
        'BlipTextEncoder'
    """
    import pickle
    import zipfile

    path = os.fspath(path)
    if os.path.isdir(path):
        raise DataFormatError(path, "is a folder; expected a checkpoint file (.pth)")
    if not os.path.isfile(path):
        raise MissingFileError(f"no checkpoint at {path}")
    try:
        with warnings.catch_warnings():  # torch warns about the pickle protocol of files it then refuses
            warnings.simplefilter("ignore")
            return torch_load_weights_only(path, mmap=mmap and zipfile.is_zipfile(path))
    except pickle.UnpicklingError as e:
        # weights_only refuses Python objects by name (a GLOBAL); an opcode it does not know
        # ("Unsupported operand") means the file is no torch.save pickle at all
        if _REFUSED_OBJECT.search(str(e)):
            raise DataFormatError(path, _not_weights_only(path, e)) from None
        raise DataFormatError(path, f"not a PyTorch checkpoint (torch.load: {_gist(e)})") from None
    except Exception as e:  # noqa: BLE001 -- the file is the only input: whatever torch.load trips on is in it
        hint = "; a .safetensors file holds no metadata: give the .pth `vlr train` wrote" \
            if path.endswith(".safetensors") else ""
        raise DataFormatError(path, f"not a PyTorch checkpoint (torch.load: {_gist(e)}){hint}") from None


def _gist(e: BaseException) -> str:
    # torch's weights_only message is a page of advice (including weights_only=False); keep its finding
    text = " ".join(str(e).split("WeightsUnpickler error:")[-1].split("Check the documentation")[0].split())
    return f"{type(e).__name__}: {text[:200]}" if text else type(e).__name__


def _checkpoint(checkpoint: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the checkpoint mapping, its meta), memory-mapped: the weights stay on disk."""
    ckpt = load_weights_only(checkpoint, mmap=True)
    if not isinstance(ckpt, dict):
        raise DataFormatError(checkpoint, f"expected a checkpoint mapping (with 'state_dict' and 'meta'), "
                                          f"found {type(ckpt).__name__}")
    meta = ckpt.get("meta") or {}
    if not isinstance(meta, dict):
        raise DataFormatError(checkpoint, f"expected a mapping, found {type(meta).__name__}", field="meta")
    return ckpt, meta


def read_checkpoint_meta(checkpoint: str | os.PathLike) -> dict[str, Any]:
    """The ``meta`` of a ``vlr train`` / ``vlr lavis-export`` checkpoint, read without loading
    the weights (a spec string, ``blip:<name>`` included: :func:`vlr_plugins.specs.text_encoder_meta`).

    A checkpoint that is not there, not a PyTorch checkpoint, not weights-only, or not a
    mapping is refused with one error naming it (see :func:`load_weights_only`).
    """
    return _checkpoint(str(checkpoint))[1]


def check_text_encoder_checkpoint(checkpoint: str | os.PathLike) -> dict[str, Any]:
    """Raise unless ``checkpoint`` is one a text encoder can be rebuilt from
    (:func:`vlr_plugins.specs.load_text_encoder`): weights-only, with the architecture in
    ``meta['vlr_text_encoder']`` and ``text_encoder.*`` weights in ``state_dict``, as
    ``vlr train`` and ``vlr lavis-export`` write it; return its ``meta``.

    Each refusal is one :class:`~vlr_plugins.errors.UserError` naming the file (and the
    key), before anything is built (``blip:<name>`` specs: :func:`vlr_plugins.specs.text_encoder_meta`).
    """
    checkpoint = str(checkpoint)
    ckpt, meta = _checkpoint(checkpoint)
    arch = meta.get("vlr_text_encoder")
    if not isinstance(arch, dict) or not isinstance(arch.get("type"), str):
        found = "missing" if arch is None else f"found {type(arch).__name__}"
        raise DataFormatError(
            checkpoint, f"expected the text encoder's architecture (a mapping with 'type'), {found}: the checkpoint "
            "was not written by `vlr train` (WeightsOnlyCheckpointHook) or `vlr lavis-export`, so its text "
            "encoder cannot be rebuilt", field="meta.vlr_text_encoder")
    state = ckpt.get("state_dict")
    # the prefix under which WeightsOnlyCheckpointHook saves the text encoder (text/load.py reads it)
    if not isinstance(state, dict) or not any(str(k).startswith("text_encoder.") for k in state):
        raise DataFormatError(checkpoint, "holds no 'text_encoder.*' weights", field="state_dict")
    return meta
