"""What a vlr text-encoder checkpoint records beside its weights (``meta``), for ``vlr export``.

``vlr train`` (``WeightsOnlyCheckpointHook``) and ``vlr lavis-export`` write:

- ``meta['vlr_text_encoder']``: the encoder's architecture (``vlr_plugins.text.load_text_encoder``);
- ``meta['vlr_recipe']``: ``Recipe.to_dict()`` of the recipe it was trained with;
- ``meta['vlr_loss']``: :func:`loss_config` of the loss object as it was when saved, so a
  model card shows the defaults the recipe left out and a learned temperature.

Imports nothing heavy: both trainers' environments (transformers 4 for LAVIS, 5 for the
rest) write it.
"""

from __future__ import annotations

import json
import os
from typing import Any

from vlr_plugins.errors import MissingFileError

__all__ = ["loss_config", "read_checkpoint_meta"]


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


def read_checkpoint_meta(checkpoint: str | os.PathLike) -> dict[str, Any]:
    """The ``meta`` of a ``vlr train`` / ``vlr lavis-export`` checkpoint (``{}`` for a
    ``blip:<name>`` spec, which has none), read without loading the weights."""
    import torch

    checkpoint = str(checkpoint)
    if checkpoint.startswith("blip:"):
        return {}
    if not os.path.isfile(checkpoint):
        raise MissingFileError(f"no checkpoint at {checkpoint}")
    # mmap: only the metadata is read here; the weights stay on disk
    return torch.load(checkpoint, map_location="cpu", weights_only=True, mmap=True).get("meta") or {}
