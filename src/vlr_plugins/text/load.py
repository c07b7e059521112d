"""Load a trained (or pretrained) text encoder from what a user has on disk."""

from __future__ import annotations

import os

import torch

from vlr_plugins.registry import MODELS

__all__ = ["load_text_encoder"]

_PREFIX = "text_encoder."


def load_text_encoder(spec: str | os.PathLike, *, map_location: str = "cpu") -> torch.nn.Module:
    """``blip:<hub name or folder>`` -> BLIP's pretrained text side (BLIP0 in the paper);
    a ``.pth`` path -> the text encoder of a ``vlr train`` (MMEngine) checkpoint.

    Checkpoints are read with ``torch.load(weights_only=True)``; the architecture comes
    from ``meta['vlr_text_encoder']`` (written by ``WeightsOnlyCheckpointHook``), never
    from executing the config text stored beside it.
    """
    spec = str(spec)
    if spec.startswith("blip:"):
        return MODELS.build({"type": "BlipTextEncoder", "pretrained": spec[len("blip:"):]})
    if not os.path.isfile(spec):
        raise FileNotFoundError(f"no checkpoint at {spec} (give a .pth file of `vlr train`, or blip:<name>)")
    ckpt = torch.load(spec, map_location=map_location, weights_only=True)
    arch = (ckpt.get("meta") or {}).get("vlr_text_encoder")
    if arch is None:
        raise ValueError(f"{spec}: meta['vlr_text_encoder'] is missing; the checkpoint was not written by "
                         "`vlr train` (WeightsOnlyCheckpointHook), so its text encoder cannot be rebuilt")
    state = {k[len(_PREFIX):]: v for k, v in ckpt["state_dict"].items() if k.startswith(_PREFIX)}
    if not state:
        raise ValueError(f"{spec}: state_dict holds no '{_PREFIX}*' weights")
    encoder = MODELS.build(arch)
    # position ids are arange buffers, persistent in transformers 4.x and not in 5.x:
    # checkpoints carry none, so either version loads them
    own = encoder.state_dict()
    state |= {k: v for k, v in own.items() if k.endswith("position_ids") and k not in state}
    encoder.load_state_dict(state)
    return encoder.eval()
