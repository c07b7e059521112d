"""Load a trained (or pretrained) text encoder from what a user has on disk."""

from __future__ import annotations

import os

import torch

from vlr_plugins.checkpoint_meta import load_weights_only
from vlr_plugins.errors import DataFormatError, MissingFileError
from vlr_plugins.registry import MODELS

__all__ = ["load_blip_text_encoder", "load_text_encoder_checkpoint"]

_PREFIX = "text_encoder."


def load_blip_text_encoder(name: str, *, setting: str) -> torch.nn.Module:
    """BLIP's pretrained text side (BLIP0 in the paper) from a Hub name or folder; a model
    that cannot be loaded (offline, no such id or folder) is a
    :class:`~vlr_plugins.errors.ModelLoadError` naming ``setting``."""
    from vlr_plugins.text.blip_text_encoder import BlipTextEncoder

    # the config first (no weights): a model that cannot be had is named with the
    # option that chose it, not with the encoder's own model.pretrained
    BlipTextEncoder.describe(pretrained=name, setting=setting)
    return MODELS.build({"type": "BlipTextEncoder", "pretrained": name})


def load_text_encoder_checkpoint(spec: str | os.PathLike, *, map_location: str = "cpu",
                                 setting: str | None = None) -> torch.nn.Module:
    """The text encoder of a ``vlr train`` (MMEngine) checkpoint (``.pth``).

    Checkpoints are read with ``torch.load(weights_only=True)``; the architecture comes
    from ``meta['vlr_text_encoder']`` (written by ``WeightsOnlyCheckpointHook``), never
    from executing the config text stored beside it. (A spec string, ``blip:`` included,
    is read by :func:`vlr_plugins.specs.load_text_encoder`.)

    Errors name ``setting`` (the option that gave ``spec``, e.g. ``--model``; default: the
    path itself): :class:`~vlr_plugins.errors.MissingFileError` for a checkpoint that is not
    there, :class:`~vlr_plugins.errors.DataFormatError` (a ``ValueError``) for a file that is
    no `vlr train` checkpoint.
    """
    spec = str(spec)
    where = setting or spec
    if not os.path.isfile(spec):
        what = "is a folder" if os.path.isdir(spec) else "no such file"
        raise MissingFileError(f"{where}: {what}: {spec} (give a .pth file of `vlr train`, or blip:<name>)")
    ckpt = load_weights_only(spec)
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("state_dict"), dict):
        raise DataFormatError(spec, "holds no 'state_dict': not a checkpoint of `vlr train`")
    arch = (ckpt.get("meta") or {}).get("vlr_text_encoder")
    if arch is None:
        raise DataFormatError(spec, "meta['vlr_text_encoder'] is missing; the checkpoint was not written by "
                                    "`vlr train` (WeightsOnlyCheckpointHook), so its text encoder cannot be "
                                    "rebuilt")
    state = {k[len(_PREFIX):]: v for k, v in ckpt["state_dict"].items() if k.startswith(_PREFIX)}
    if not state:
        raise DataFormatError(spec, f"state_dict holds no '{_PREFIX}*' weights")
    encoder = MODELS.build(arch)
    # position ids are arange buffers, persistent in transformers 4.x and not in 5.x:
    # checkpoints carry none, so either version loads them
    own = encoder.state_dict()
    state |= {k: v for k, v in own.items() if k.endswith("position_ids") and k not in state}
    encoder.load_state_dict(state)
    return encoder.to(map_location).eval()

