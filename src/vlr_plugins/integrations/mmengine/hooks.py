"""Checkpoints that current torch loads with ``weights_only=True``.

Since torch 2.6 ``torch.load`` refuses to unpickle arbitrary objects by default, and
MMEngine 0.10 checkpoints hold some (the message hub's ``HistoryBuffer`` pickles bound
methods through ``getattr``; numpy arrays and scalars), so ``resume=True`` fails. Allow-
listing those globals would allow ``getattr`` — arbitrary code — so instead this hook
stores them as plain tensors and numbers, and turns them back into what MMEngine
expects when a checkpoint is loaded. Weights-only loading stays on.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch
from mmengine.hooks import Hook
from mmengine.logging import HistoryBuffer

from vlr_plugins.integrations.mmengine.registry import HOOKS

__all__ = ["WeightsOnlyCheckpointHook", "to_weights_only", "from_weights_only"]

_BUFFER = "__vlr_history_buffer__"


def to_weights_only(obj: Any) -> Any:
    """Replace HistoryBuffers, numpy arrays and numpy scalars by tensors / python numbers."""
    if isinstance(obj, HistoryBuffer):
        log, count = obj.data
        return {_BUFFER: True, "log_history": torch.from_numpy(np.asarray(log).copy()),
                "count_history": torch.from_numpy(np.asarray(count).copy()), "max_length": int(obj.max_length)}
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj.copy())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return type(obj)((k, to_weights_only(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_weights_only(v) for v in obj)
    return obj


def from_weights_only(obj: Any) -> Any:
    """Inverse of :func:`to_weights_only` for the message hub's history buffers."""
    if isinstance(obj, dict):
        if obj.get(_BUFFER):
            return HistoryBuffer(obj["log_history"].numpy(), obj["count_history"].numpy(), obj["max_length"])
        return type(obj)((k, from_weights_only(v)) for k, v in obj.items())
    return obj


#: the training length a checkpoint's parameter schedules were built for (``train_cfg``)
SCHEDULE_KEYS = ("max_epochs", "max_iters")


@HOOKS.register_module()
class WeightsOnlyCheckpointHook(Hook):
    """Make MMEngine checkpoints loadable by ``torch.load(weights_only=True)`` and resumable.

    Also records the text encoder's architecture (``meta['vlr_text_encoder']``) so the
    checkpoint alone rebuilds it (``vlr_plugins.specs.load_text_encoder``), the video
    tower's when the model trains one (``meta['vlr_video_encoder']``, read by ``vlr
    precompute --encoder vlr:CHECKPOINT``), and for model
    cards the recipe (``meta['vlr_recipe']``) and the configuration of the loss as it is
    when saved (``meta['vlr_loss']``, :func:`vlr_plugins.checkpoint_meta.loss_config`), and
    the training length its schedules were built for (``meta['vlr_schedule']``: the
    ``train_cfg`` keys of :data:`SCHEDULE_KEYS`).

    Runs last when saving (after hooks that add to the checkpoint) and converts back
    after loading. Add it with ``custom_hooks=[dict(type='WeightsOnlyCheckpointHook')]``.
    """

    priority = "VERY_LOW"

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        from vlr_plugins.checkpoint_meta import loss_config

        model = getattr(runner.model, "module", runner.model)
        encoder = getattr(model, "text_encoder", None)
        if hasattr(encoder, "to_config"):
            # lets `vlr eval` / export rebuild the encoder from the checkpoint alone,
            # without executing the (Python) config text MMEngine stores beside it
            checkpoint.setdefault("meta", {})["vlr_text_encoder"] = encoder.to_config()
        tower = getattr(model, "video_encoder", None)
        if hasattr(tower, "to_config"):
            checkpoint.setdefault("meta", {})["vlr_video_encoder"] = json.loads(json.dumps(tower.to_config()))
        recipe = runner.cfg.get("vlr_recipe")
        if recipe is not None:  # for model cards and exports (plain types only)
            checkpoint.setdefault("meta", {})["vlr_recipe"] = json.loads(json.dumps(recipe.to_dict()))
        schedule = {k: v for k, v in (runner.cfg.get("train_cfg") or {}).items() if k in SCHEDULE_KEYS}
        if schedule:  # a resumed run must ask for the same (vlr train refuses otherwise)
            checkpoint.setdefault("meta", {})["vlr_schedule"] = schedule
        loss = loss_config(getattr(model, "loss_fn", None))
        if loss is not None:  # the card's loss line: defaults and a learned temperature included
            checkpoint.setdefault("meta", {})["vlr_loss"] = loss
        for key in ("meta", "message_hub"):
            if key in checkpoint:
                checkpoint[key] = to_weights_only(checkpoint[key])

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        if "message_hub" in checkpoint:
            checkpoint["message_hub"] = from_weights_only(checkpoint["message_hub"])
