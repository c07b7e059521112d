"""Long-CLIP's own checkpoints (``longclip-B.pt``, ``longclip-L.pt``) in an open_clip model.

Long-CLIP (Zhang et al., ECCV 2024; github.com/beichenzbc/Long-CLIP) saves
``model.state_dict()`` of its own CLIP class as a plain state dict in OpenAI CLIP's key
layout (which is open_clip ``CLIP``'s), with two text positional tables instead of one:
``positional_embedding`` and ``positional_embedding_res``, both ``(248, width)``. Its
``encode_text`` adds ``positional_embedding * mask1 + positional_embedding_res * mask2`` to
the token embeddings, where the fixed ``(248, 1)`` masks are one on rows 0..19 (``mask1``)
and on rows 20..247 (``mask2``), zero elsewhere. (In training the first table does not
require grad: rows 0..19 stay CLIP's own, and rows 0..19 of ``_res`` are never used.)

Row by row, that masked sum *is* one table: at a row ``r < 20`` Long-CLIP adds
``pos[r] * 1`` and ``res[r] * 0``, and times one, times zero and adding a zero are exact
in every float format, so ``x + pos[r]*1 + res[r]*0 == x + pos[r]`` exactly, a zero's
sign aside (and ``x + res[r]`` at ``r >= 20``), in float32 and after a cast to half alike. The only inputs
where this fails are non-finite table entries (``inf * 0`` is NaN), which are refused. So
:func:`fold_long_clip_positions` loads such a checkpoint as one 248-row table, rows 0..19
from ``positional_embedding`` and rows 20..247 from ``positional_embedding_res``, into an
open_clip model with 248 text positions and QuickGELU (Long-CLIP's only activation):
its ``encode_text`` then equals Long-CLIP's on the same weights, for every input.

:func:`~vlr_plugins.integrations.open_clip.long_context.create_long_context_model_and_transforms`
calls this for a checkpoint file holding ``positional_embedding_res`` (``vlr eval --model
open_clip:ViT-B-16-quickgelu-ctx248:longclip-B.pt``, ``vlr openclip-train --model
ViT-B-16-quickgelu-ctx248 --pretrained longclip-B.pt``). The ``_res`` table is never
dropped: with it ignored, a model runs on the wrong rows 20..247.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

import torch
from torch import nn

from vlr_plugins.errors import ConfigError, DataFormatError

__all__ = [
    "LONG_CLIP_POSITIONS",
    "LONG_CLIP_KEPT",
    "RES_KEY",
    "is_long_clip_state",
    "fold_long_clip_positions",
    "check_long_clip_context",
    "check_long_clip_model",
    "load_folded_state",
    "long_clip_model_name",
    "refuse_under_short_name",
]

LONG_CLIP_POSITIONS = 248  # the rows of both tables and of Long-CLIP's masks
LONG_CLIP_KEPT = 20  # rows taken from positional_embedding (mask1); the rest from _res
RES_KEY = "positional_embedding_res"
POS_KEY = "positional_embedding"
log = logging.getLogger(__name__)


def is_long_clip_state(state: dict[str, Any]) -> bool:
    """Whether a state dict is in Long-CLIP's two-table layout."""
    return RES_KEY in state


def refuse_under_short_name(error: RuntimeError, pretrained: str, *, setting: str, give: str) -> None:
    """Raise the one error for open_clip's strict load having refused ``pretrained``'s
    ``positional_embedding_res`` (a Long-CLIP checkpoint under a 77-token name): ``give`` is
    what to pass instead (built with :func:`long_clip_model_name`). Returns for any other error."""
    if RES_KEY in str(error):
        raise ConfigError(f"{setting}: {pretrained} is a Long-CLIP checkpoint (key {RES_KEY!r}), which needs 248 "
                          f"positions and QuickGELU: give {give}") from None


def long_clip_model_name(model_name: str) -> str:
    """The open_clip name to load a Long-CLIP fine-tune of ``model_name`` as: 248 positions, and
    the ``-quickgelu`` variant where the base has another activation and open_clip has one
    (``ViT-B-16`` -> ``ViT-B-16-quickgelu-ctx248``)."""
    import open_clip

    base = re.sub(r"-ctx\d+$", "", model_name)
    cfg = open_clip.get_model_config(base) or {}
    if not cfg.get("quick_gelu") and open_clip.get_model_config(f"{base}-quickgelu") is not None:
        base += "-quickgelu"
    return f"{base}-ctx{LONG_CLIP_POSITIONS}"


def fold_long_clip_positions(
    state: dict[str, Any], path: str | os.PathLike
) -> dict[str, torch.Tensor]:
    """A Long-CLIP state dict -> the same with one ``positional_embedding`` (see the module).

    Refused, as a :class:`~vlr_plugins.errors.DataFormatError` naming ``path`` and the key:
    a ``_res`` table without ``positional_embedding``, tables that are not both
    ``(248, width)``, and non-finite entries (where Long-CLIP's masked sum is NaN and no
    single table equals it).
    """
    res = state[RES_KEY]
    if POS_KEY not in state:
        raise DataFormatError(path, f"holds {RES_KEY} (Long-CLIP's second text positional table) "
                                    f"but no {POS_KEY}", field=RES_KEY)
    pos = state[POS_KEY]
    if pos.dim() != 2 or pos.shape[0] != LONG_CLIP_POSITIONS:
        raise DataFormatError(path, f"a Long-CLIP checkpoint (it holds {RES_KEY}) has a "
                                    f"({LONG_CLIP_POSITIONS}, width) {POS_KEY}, as Long-CLIP's "
                                    f"encode_text masks {LONG_CLIP_POSITIONS} rows; found shape "
                                    f"{tuple(pos.shape)}", field=POS_KEY)
    if res.shape != pos.shape:
        raise DataFormatError(path, f"Long-CLIP's {RES_KEY} must have the shape of {POS_KEY} "
                                    f"{tuple(pos.shape)}; found {tuple(res.shape)}", field=RES_KEY)
    for key, table in ((POS_KEY, pos), (RES_KEY, res)):
        if not torch.isfinite(table).all():
            raise DataFormatError(path, "holds non-finite values (Long-CLIP's masked sum of the "
                                        "two tables would be NaN there)", field=key)
    folded = torch.cat([pos[:LONG_CLIP_KEPT], res[LONG_CLIP_KEPT:]])
    out = {k: v for k, v in state.items() if k != RES_KEY}
    out[POS_KEY] = folded
    return out


def check_long_clip_context(model_name: str, path: str | os.PathLike, context_length: int) -> None:
    """A :class:`~vlr_plugins.errors.ConfigError` unless the model is to have 248 text positions."""
    if context_length != LONG_CLIP_POSITIONS:
        raise ConfigError(f"{os.fspath(path)}: a Long-CLIP checkpoint (key {RES_KEY!r}) has "
                          f"{LONG_CLIP_POSITIONS} text positions; {model_name} has "
                          f"{context_length}: load it as {long_clip_model_name(model_name)}")


def check_long_clip_model(model: nn.Module, model_name: str, path: str | os.PathLike) -> None:
    """A :class:`~vlr_plugins.errors.ConfigError` unless ``model`` runs a Long-CLIP checkpoint
    as Long-CLIP does: 248 text positions, an open_clip text transformer with QuickGELU."""
    from open_clip.transformer import QuickGELU

    check_long_clip_context(model_name, path, int(getattr(model, "context_length", 0) or 0))
    fix = f"load it as {long_clip_model_name(model_name)}"
    owner = model if isinstance(getattr(model, POS_KEY, None), nn.Parameter) else getattr(model, "text", None)
    tower = getattr(owner, "transformer", None)
    if tower is None or not isinstance(getattr(owner, POS_KEY, None), nn.Parameter):
        raise ConfigError(f"{os.fspath(path)}: a Long-CLIP checkpoint (key {RES_KEY!r}) is an "
                          f"OpenAI-layout CLIP; {model_name} has no open_clip text transformer: {fix}")
    if not any(isinstance(m, QuickGELU) for m in tower.modules()):
        if long_clip_model_name(model_name) == model_name:
            fix = 'give a config with "quick_gelu": true'
        raise ConfigError(f"{os.fspath(path)}: a Long-CLIP checkpoint (key {RES_KEY!r}) runs "
                          f"QuickGELU, as OpenAI's CLIP does; {model_name} uses another "
                          f"activation and would embed its texts differently: {fix} (or "
                          f"force_quick_gelu=True in Python, --force-quickgelu in training)")


def load_folded_state(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load a folded state dict as ``open_clip.factory.load_checkpoint`` loads a file: the same
    conversions (third-party layouts, a ``CustomTextCLIP`` text tower, the ``logit_scale`` /
    ``logit_bias`` shapes, the image positions), then ``load_state_dict(strict=True)``."""
    from open_clip.convert import convert_state_dict
    from open_clip.model import convert_to_custom_text_state_dict, resize_pos_embed

    state = convert_state_dict(model, state)
    if POS_KEY in state and not hasattr(model, POS_KEY):
        state = convert_to_custom_text_state_dict(state)
    if "logit_scale" in state and model.logit_scale.ndim != state["logit_scale"].ndim:
        state["logit_scale"] = state["logit_scale"].reshape(model.logit_scale.shape)
    if getattr(model, "logit_bias", None) is not None and "logit_bias" not in state:
        state["logit_bias"] = torch.zeros_like(state["logit_scale"])
    resize_pos_embed(state, model)
    model.load_state_dict(state, strict=True)
    log.info("loaded a Long-CLIP checkpoint: %s rows 0-%d and %s rows %d-%d as one table",
             POS_KEY, LONG_CLIP_KEPT - 1, RES_KEY, LONG_CLIP_KEPT, LONG_CLIP_POSITIONS - 1)
