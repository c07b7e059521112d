"""The ``video_config`` of an MVC export: the video tower's architecture as plain JSON.

``{"type": "SpaceTimeViT", "num_frames", "image_size", "patch_size", "tubelet_size", "width",
"depth", "num_heads", "mlp_ratio", "qkv_bias", "layer_norm_eps", "init_values", "pos_embed",
"pretrained_num_frames", "pretrained_image_size", "final_norm", "pool_norm", "pool_norm_eps",
"embed_dim", "normalize", "image_mean", "image_std", "frame_sampling"}``: the fields of
vlr-plugins' ``SpaceTimeViT.to_config()`` that shape the evaluated tower (training-only
ones, token dropping, stochastic depth, checkpointing, are left out), and how its clips are
made: ``num_frames`` frames picked by ``frame_sampling`` (``middle``), resized (shorter side)
and centre-cropped to ``image_size``, normalised with ``image_mean`` / ``image_std``.

This file is copied beside exported weights and imported where vlr-plugins is not
installed: it imports nothing but the standard library.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ARCHITECTURE_KEYS", "FRAME_SAMPLINGS", "VIDEO_TOWER_TYPES", "check_video_config", "video_config_of"]

#: the vlr-plugins towers an export restates (``video_config['type']``)
VIDEO_TOWER_TYPES = ("SpaceTimeViT",)
#: the frame sampling rules the exported tower's clips may come from (UMT's evaluation rule;
#: CaReBench's ``uniform`` picks the same frames)
FRAME_SAMPLINGS = ("middle", "uniform")
#: the ``SpaceTimeViT`` arguments that shape the evaluated tower, as ``video_config`` holds them
ARCHITECTURE_KEYS = ("num_frames", "image_size", "patch_size", "tubelet_size", "width", "depth", "num_heads",
                     "mlp_ratio", "qkv_bias", "layer_norm_eps", "init_values", "pos_embed", "pretrained_num_frames",
                     "pretrained_image_size", "final_norm", "pool_norm", "pool_norm_eps", "embed_dim", "normalize",
                     "image_mean", "image_std")
_REQUIRED = ("num_frames", "image_size", "patch_size", "tubelet_size", "width", "depth", "num_heads",
             "image_mean", "image_std")


def _positive_int(cfg: dict[str, Any], key: str) -> None:
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"video_config[{key!r}] must be a positive int, found {value!r}")


def check_video_config(video_config: Any) -> dict[str, Any]:
    """``video_config`` as a plain dict, or a ``ValueError`` naming what is wrong with it."""
    if not isinstance(video_config, dict):
        raise ValueError(f"video_config must be a dict (the video tower's architecture), found "
                         f"{type(video_config).__name__}")
    kind = video_config.get("type")
    if kind not in VIDEO_TOWER_TYPES:
        raise ValueError(f"video_config['type'] is {kind!r}; the exported video tower is one of "
                         f"{', '.join(VIDEO_TOWER_TYPES)}")
    unknown = sorted(set(video_config) - {"type", "frame_sampling", *ARCHITECTURE_KEYS})
    if unknown:
        raise ValueError(f"video_config has unknown keys {unknown}; its keys are type, frame_sampling and "
                         f"{', '.join(ARCHITECTURE_KEYS)}")
    missing = [k for k in _REQUIRED if k not in video_config]
    if missing:
        raise ValueError(f"video_config lacks {', '.join(missing)}")
    for key in ("num_frames", "image_size", "patch_size", "tubelet_size", "width", "depth", "num_heads"):
        _positive_int(video_config, key)
    if video_config.get("pos_embed", "sincos") not in ("sincos", "learned"):
        raise ValueError(f"video_config['pos_embed'] must be 'sincos' or 'learned', found {video_config['pos_embed']!r}")
    sampling = video_config.get("frame_sampling", "middle")
    if sampling not in FRAME_SAMPLINGS:
        raise ValueError(f"video_config['frame_sampling'] must be one of {FRAME_SAMPLINGS}, found {sampling!r}")
    if video_config["num_frames"] % video_config["tubelet_size"] or \
            video_config["image_size"] % video_config["patch_size"]:
        raise ValueError("video_config: num_frames must be a multiple of tubelet_size and image_size of patch_size")
    for key in ("image_mean", "image_std"):
        values = video_config[key]
        if not isinstance(values, (list, tuple)) or len(values) != 3:
            raise ValueError(f"video_config[{key!r}] must be 3 numbers (R, G, B), found {values!r}")
    return {**video_config, "frame_sampling": sampling}


def video_config_of(tower: Any) -> dict[str, Any]:
    """The ``video_config`` of a vlr-plugins video tower (its ``to_config()``, evaluated fields only)."""
    to_config = getattr(tower, "to_config", None)
    recorded = to_config() if callable(to_config) else {}
    kind = recorded.get("type", type(tower).__name__)
    if kind not in VIDEO_TOWER_TYPES:
        raise TypeError(f"cannot export a {kind} video tower: the export restates {', '.join(VIDEO_TOWER_TYPES)} "
                        "(the tower `vlr train mvc` trains)")
    return {"type": kind, **{k: recorded[k] for k in ARCHITECTURE_KEYS if k in recorded}, "frame_sampling": "middle"}
