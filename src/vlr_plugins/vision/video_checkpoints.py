"""Video-ViT checkpoints of VideoMAE (transformers), UMT and SMILE, read into a SpaceTimeViT.

One key mapping per layout turns a checkpoint's names into :class:`SpaceTimeViT`'s (timm
``Block`` names). The layouts:

* ``videomae``: transformers' ``VideoMAEModel`` (``embeddings.patch_embeddings.projection``,
  ``encoder.layer.N.attention.attention.query``/``key``/``value``, ``layernorm_before`` ...),
  optionally under ``videomae.`` (``VideoMAEForVideoClassification`` / ``ForPreTraining``,
  whose ``fc_norm`` becomes ``pool_norm``); the older ``q_bias`` / ``v_bias`` names too.
  That ``fc_norm`` has torch's eps (:data:`VIDEOMAE_FC_NORM_EPS`), not the config's
  ``layer_norm_eps``: loading it sets the tower's ``pool_norm_eps`` so, unless one was given.
* ``umt``: Unmasked Teacher's ViT (``encoder.patch_embed.proj``, ``encoder.blocks.N.attn.qkv``
  with ``q_bias`` / ``v_bias``, ``encoder.norm``, ``pool_norm``), as a backbone checkpoint or
  inside a full UMT model (``vision_encoder.`` prefix, ``vision_proj`` becomes ``proj``).
* ``smile``: SMILE's checkpoints, which are in the layout of VideoMAE's own code (also UMT's
  single-modality fine-tuning): pre-training (``encoder.`` prefix, with a pixel decoder) or
  fine-tuning (no prefix, ``fc_norm`` becomes ``pool_norm``).
* ``native``: a :class:`SpaceTimeViT` state dict.

The query / key / value projections are fused into timm's ``qkv``; the key bias, which
VideoMAE and UMT do not have, is zero (softmax ignores it, so its gradient is zero too).
Parts that are not the vision tower (text encoders, pixel decoders, CLIP-alignment decoders,
classifiers) are dropped and reported; any other unknown key is left for strict loading to
refuse.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vlr_plugins.pickled_configs import CONFIG_CLASSES, torch_load_weights_only
from vlr_plugins.vision.positions import resample_spatial, resample_temporal

__all__ = ["CHECKPOINT_LAYOUTS", "VIDEOMAE_FC_NORM_EPS", "LoadedCheckpoint", "detect_layout",
           "load_video_checkpoint", "read_state_dict", "smile_to_space_time", "umt_to_space_time",
           "videomae_to_space_time"]

logger = logging.getLogger(__name__)

CHECKPOINT_LAYOUTS = ("videomae", "umt", "smile", "native")

#: the eps of ``VideoMAEForVideoClassification.fc_norm``: ``nn.LayerNorm(hidden_size)``, torch's default
VIDEOMAE_FC_NORM_EPS = 1e-5

_VIDEOMAE_RENAMES = [
    (r"^embeddings\.patch_embeddings\.projection\.", "patch_embed."),
    (r"^encoder\.layer\.(\d+)\.attention\.attention\.q_bias$", r"blocks.\1.attn.query.bias"),
    (r"^encoder\.layer\.(\d+)\.attention\.attention\.v_bias$", r"blocks.\1.attn.value.bias"),
    (r"^encoder\.layer\.(\d+)\.attention\.attention\.(query|key|value)\.", r"blocks.\1.attn.\2."),
    (r"^encoder\.layer\.(\d+)\.attention\.output\.dense\.", r"blocks.\1.attn.proj."),
    (r"^encoder\.layer\.(\d+)\.intermediate\.dense\.", r"blocks.\1.mlp.fc1."),
    (r"^encoder\.layer\.(\d+)\.output\.dense\.", r"blocks.\1.mlp.fc2."),
    (r"^encoder\.layer\.(\d+)\.layernorm_before\.", r"blocks.\1.norm1."),
    (r"^encoder\.layer\.(\d+)\.layernorm_after\.", r"blocks.\1.norm2."),
    (r"^layernorm\.", "norm."),
    (r"^fc_norm\.", "pool_norm."),
]
_VIDEOMAE_DROPPED = ("classifier.", "decoder.", "encoder_to_decoder.", "mask_token")

# VideoMAE's own code, UMT and SMILE share these block names
_CODE_RENAMES = [
    (r"^patch_embed\.proj\.", "patch_embed."),
    (r"^blocks\.(\d+)\.attn\.q_bias$", r"blocks.\1.attn.query.bias"),
    (r"^blocks\.(\d+)\.attn\.v_bias$", r"blocks.\1.attn.value.bias"),
    (r"^blocks\.(\d+)\.gamma_1$", r"blocks.\1.ls1.gamma"),
    (r"^blocks\.(\d+)\.gamma_2$", r"blocks.\1.ls2.gamma"),
    (r"^fc_norm\.", "pool_norm."),
]
_UMT_DROPPED = ("clip_decoder.", "clip_teacher.", "clip_pos_embed", "clip_img_pos_embed", "text_encoder.",
                "text_decoder.", "text_proj.", "itm_head.", "temp")
_SMILE_DROPPED = ("decoder.", "encoder_to_decoder.", "mask_token", "head.")


@dataclass
class LoadedCheckpoint:
    """What :func:`load_video_checkpoint` did: the layout, the checkpoint keys it dropped as
    not part of the vision tower, and (non-strict loading only) missing / unexpected keys."""

    layout: str
    dropped: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint file: safetensors, or a torch file read weights-only
    (the training config UMT / SMILE checkpoints pickle beside the weights is read as a dict:
    :func:`vlr_plugins.pickled_configs.torch_load_weights_only`).

    A folder (e.g. a downloaded transformers model) gives its ``model.safetensors`` or
    ``pytorch_model.bin``. A training checkpoint's ``model`` / ``module`` / ``state_dict``
    entry is taken when present.
    """
    path = Path(path)
    if path.is_dir():
        found = [path / n for n in ("model.safetensors", "pytorch_model.bin") if (path / n).is_file()]
        if not found:
            raise FileNotFoundError(f"{path} holds neither model.safetensors nor pytorch_model.bin")
        path = found[0]
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint file at {path}")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    try:
        obj = torch_load_weights_only(path)
    except Exception as err:
        if not re.search(r"Unsupported global|GLOBAL |unrecognized function|Unsupported class", str(err)):
            raise ValueError(f"{path} is not a PyTorch checkpoint (torch.load: {type(err).__name__}: "
                             f"{_gist(err)})") from None
        found = re.search(r"GLOBAL ([\w.]+)", str(err))
        what = f" ({found.group(1)})" if found else ""
        raise ValueError(
            f"{path} holds more than tensors: a pickled Python object{what} other than the training "
            f"configs read as dicts ({', '.join(CONFIG_CLASSES)}), which is not read for safety; load it "
            f"yourself where you trust it and save its state dict with safetensors.torch.save_file "
            f"({type(err).__name__}: {_gist(err)})") from None
    return _unwrap(obj, str(path))


def _gist(err: BaseException) -> str:
    # torch's weights_only message is a page of advice, weights_only=False among it: keep its finding
    text = " ".join(str(err).split("WeightsUnpickler error:")[-1].split("Check the documentation")[0].split())
    return text[:300]


def _unwrap(obj: Any, where: str = "the checkpoint") -> dict[str, torch.Tensor]:
    if not isinstance(obj, Mapping):
        raise TypeError(f"{where} should hold a state dict, got a {type(obj).__name__}")
    for key in ("model", "module", "state_dict"):
        if isinstance(obj.get(key), Mapping):
            return dict(obj[key])
    return dict(obj)


def _rename(key: str, renames: list[tuple[str, str]]) -> str:
    for pattern, repl in renames:
        new, n = re.subn(pattern, repl, key)
        if n:
            return new
    return key


def _fuse_qkv(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Separate ``attn.query|key|value`` weights and biases -> timm's fused ``attn.qkv``."""
    separate = (re.match(r"^(blocks\.\d+\.attn)\.(query|key|value)\.", k) for k in state)
    blocks = sorted({m.group(1) for m in separate if m})
    for prefix in blocks:
        parts = {p: state.pop(f"{prefix}.{p}.weight", None) for p in ("query", "key", "value")}
        if all(w is not None for w in parts.values()):
            state[f"{prefix}.qkv.weight"] = torch.cat([parts["query"], parts["key"], parts["value"]])
        elif any(w is not None for w in parts.values()):
            raise KeyError(f"{prefix}: the checkpoint has only some of the query/key/value weights")
        biases = {p: state.pop(f"{prefix}.{p}.bias", None) for p in ("query", "key", "value")}
        present = [b for b in biases.values() if b is not None]
        if present:
            state[f"{prefix}.qkv.bias"] = torch.cat(
                [b if b is not None else torch.zeros_like(present[0]) for b in biases.values()])
    return state


def _is_dropped(name: str, dropped: tuple[str, ...]) -> bool:
    # entries ending in "." are module prefixes, the others whole parameter names
    return any(name.startswith(d) if d.endswith(".") else name == d for d in dropped)


def _map(state_dict: Mapping[str, torch.Tensor], strip: tuple[str, ...], renames: list[tuple[str, str]],
         dropped_names: tuple[str, ...], top: Mapping[str, str] | None = None) -> tuple[dict, list[str]]:
    top = top or {}
    out: dict[str, torch.Tensor] = {}
    dropped: list[str] = []
    for key, value in _unwrap(state_dict).items():
        name = key
        for prefix in strip:
            if name.startswith(prefix):
                name = name[len(prefix):]
        top_prefix = next((p for p in top if name.startswith(p)), None)
        if top_prefix is not None:
            out[top[top_prefix] + name[len(top_prefix):]] = value
        elif _is_dropped(name, dropped_names):
            dropped.append(key)
        else:
            out[_rename(name, renames)] = value
    return _fuse_qkv(out), sorted(dropped)


def _videomae(state_dict):
    return _map(state_dict, ("videomae.",), _VIDEOMAE_RENAMES, _VIDEOMAE_DROPPED)


def _umt(state_dict):
    return _map(state_dict, ("vision_encoder.", "encoder."), _CODE_RENAMES, _UMT_DROPPED,
                top={"vision_proj.": "proj."})


def _smile(state_dict):
    return _map(state_dict, ("backbone.", "encoder."), _CODE_RENAMES, _SMILE_DROPPED)


def _native(state_dict):
    return _unwrap(state_dict), []


_LAYOUT_MAPS = {"videomae": _videomae, "umt": _umt, "smile": _smile, "native": _native}


def videomae_to_space_time(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A transformers VideoMAE state dict -> :class:`SpaceTimeViT` names (see the module doc)."""
    return _videomae(state_dict)[0]


def umt_to_space_time(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A UMT vision-encoder or full UMT state dict -> :class:`SpaceTimeViT` names."""
    return _umt(state_dict)[0]


def smile_to_space_time(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A SMILE (VideoMAE-code) pre-training or fine-tuning state dict -> :class:`SpaceTimeViT` names."""
    return _smile(state_dict)[0]


def detect_layout(state_dict: Mapping[str, torch.Tensor]) -> str:
    """Which of :data:`CHECKPOINT_LAYOUTS` a state dict is in, from its key names."""
    keys = list(_unwrap(state_dict))
    if any(re.search(r"(^|\.)encoder\.layer\.\d+\.attention\.attention\.", k) for k in keys):
        return "videomae"
    if any(k.startswith(("vision_encoder.", "clip_decoder.", "vision_proj.", "pool_norm.")) for k in keys):
        return "umt"
    if any(re.match(r"^((encoder|backbone)\.)?patch_embed\.proj\.", k) for k in keys):
        return "smile"
    if "patch_embed.weight" in keys:
        return "native"
    raise ValueError(f"cannot tell the layout of a checkpoint with keys {keys[:6]}...; "
                     f"pass layout= one of {CHECKPOINT_LAYOUTS}")


def _resample_learnt(state: dict[str, torch.Tensor], model: nn.Module) -> None:
    if getattr(model, "pos_embed_kind", None) != "learned":
        return
    temporal = state.get("pos_embed_temporal")
    if temporal is not None and temporal.shape != model.pos_embed_temporal.shape:
        state["pos_embed_temporal"] = resample_temporal(temporal, model.pos_embed_temporal.shape[1])
    spatial = state.get("pos_embed_spatial")
    if spatial is not None and spatial.shape != model.pos_embed_spatial.shape:
        side = round(spatial.shape[1] ** 0.5)
        if side * side != spatial.shape[1]:
            raise ValueError(f"pos_embed_spatial of {spatial.shape[1]} rows is not a square patch grid")
        state["pos_embed_spatial"] = resample_spatial(spatial, (side, side), model.grid[1:])


def _hint(keys: list[str], in_checkpoint: bool) -> str:
    """The constructor flag that makes the tower have (or not have) these keys."""
    tips = []
    if any(k.startswith("norm.") for k in keys):
        tips.append(f"final_norm={in_checkpoint}")
    if any(k.startswith("pool_norm.") for k in keys):
        tips.append(f"pool_norm={in_checkpoint}")
    if any(k.startswith("proj.") for k in keys):
        tips.append("embed_dim=<the checkpoint's projection width>" if in_checkpoint else "embed_dim=None")
    return f" (build the tower with {', '.join(tips)})" if tips else ""


def _videomae_fc_norm_eps(model: nn.Module, where: str) -> None:
    """A VideoMAEForVideoClassification ``fc_norm`` was loaded into ``pool_norm``: use its eps."""
    if not hasattr(model, "set_pool_norm_eps"):
        return
    given = model.config.get("pool_norm_eps")
    if given is None:
        model.set_pool_norm_eps(VIDEOMAE_FC_NORM_EPS)
    elif given != VIDEOMAE_FC_NORM_EPS:
        logger.warning("%s: transformers' VideoMAE fc_norm uses eps %g; the tower keeps its pool_norm_eps=%g",
                       where, VIDEOMAE_FC_NORM_EPS, given)


def load_video_checkpoint(model: nn.Module, checkpoint: str | Path | Mapping[str, torch.Tensor],
                          layout: str = "auto", *, strict: bool = True) -> LoadedCheckpoint:
    """Load a VideoMAE / UMT / SMILE / native checkpoint (a file or a state dict) into ``model``.

    Keys are mapped for ``layout`` (``"auto"``: :func:`detect_layout`), parts that are not the
    vision tower are dropped, learnt position tables are resampled to the tower's grid
    (fixed sin-cos tables are rebuilt from ``pretrained_num_frames`` /
    ``pretrained_image_size`` instead), shapes are checked, and the state dict is loaded;
    ``strict`` refuses missing or unexpected keys, naming the flag that would fit. A
    ``videomae`` checkpoint with ``fc_norm`` (``VideoMAEForVideoClassification``) sets the
    tower's ``pool_norm_eps`` to :data:`VIDEOMAE_FC_NORM_EPS` when the tower left it unset.
    """
    state = read_state_dict(checkpoint) if isinstance(checkpoint, (str, Path)) else _unwrap(checkpoint)
    where = str(checkpoint) if isinstance(checkpoint, (str, Path)) else "the state dict"
    layout = detect_layout(state) if layout == "auto" else layout
    if layout not in _LAYOUT_MAPS:
        raise ValueError(f"checkpoint layout must be 'auto' or one of {CHECKPOINT_LAYOUTS}, got {layout!r}")
    mapped, dropped = _LAYOUT_MAPS[layout](state)
    if dropped:
        logger.info("%s (%s layout): dropped %d keys that are not the vision tower",
                    where, layout, len(dropped))
    _resample_learnt(mapped, model)
    own = model.state_dict()
    wrong = [f"{k}: checkpoint {tuple(v.shape)}, tower {tuple(own[k].shape)}"
             for k, v in mapped.items() if k in own and own[k].shape != v.shape]
    if wrong:
        raise ValueError(f"{where} ({layout} layout) does not fit this {type(model).__name__}'s shapes "
                         f"(check width, mlp_ratio, patch_size, tubelet_size, embed_dim): "
                         + "; ".join(wrong))
    result = model.load_state_dict(mapped, strict=False)
    missing, unexpected = list(result.missing_keys), list(result.unexpected_keys)
    if strict and (missing or unexpected):
        parts = []
        if missing:
            parts.append(f"missing {missing}{_hint(missing, False)}")
        if unexpected:
            parts.append(f"unexpected {unexpected}{_hint(unexpected, True)}")
        raise KeyError(f"{where} ({layout} layout) does not match this {type(model).__name__}: "
                       + "; ".join(parts))
    if layout == "videomae" and "pool_norm.weight" in mapped and "pool_norm.weight" not in unexpected:
        _videomae_fc_norm_eps(model, where)
    return LoadedCheckpoint(layout=layout, dropped=dropped, missing=missing, unexpected=unexpected)
