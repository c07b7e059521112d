"""Image encoders of any family behind one call, recognised by their attributes.

open_clip, timm and transformers each expose an image tower differently; :class:`ImageTower`
wraps one so that ``tower(images)`` gives the embedding the family itself uses for
retrieval, and carries its normalisation. Nothing here imports open_clip, timm or
transformers at module import: a tower is recognised by what it has, and
:func:`build_image_tower` imports the one library a config names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

__all__ = ["ImageTower", "wrap_image_tower", "build_image_tower", "CLIP_MEAN", "CLIP_STD",
           "IMAGENET_MEAN", "IMAGENET_STD", "TOWER_KINDS"]

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

TOWER_KINDS = ("open_clip", "timm", "transformers", "module")

# transformers model types whose processors normalise with OpenAI CLIP's statistics
_CLIP_NORMALISED = ("clip", "blip")


def _square(size: Any) -> int | tuple[int, int]:
    if isinstance(size, int):
        return size
    h, w = (int(s) for s in tuple(size)[-2:])
    return h if h == w else (h, w)


def _triple(values: Any, name: str) -> tuple[float, float, float]:
    out = tuple(float(v) for v in values)
    if len(out) != 3:
        raise ValueError(f"{name} needs one value per RGB channel, got {values!r}")
    return out  # type: ignore[return-value]


class ImageTower(nn.Module):
    """images (N, 3, H, W) -> (N, dim): one family's image embedding and its normalisation.

    ``kind`` is one of :data:`TOWER_KINDS`; ``projects`` says whether ``dim`` is already the
    tower's own shared (image-text) space. Build one with :func:`wrap_image_tower`.
    """

    def __init__(self, kind: str, encoder: nn.Module, dim: int | None, projects: bool,
                 image_mean: Any, image_std: Any, image_size: Any, *, cls_token: bool = False) -> None:
        super().__init__()
        if kind not in TOWER_KINDS:
            raise ValueError(f"image tower kind must be one of {TOWER_KINDS}, got {kind!r}")
        self.kind = kind
        self.encoder = encoder
        self.dim = dim
        self.projects = projects
        self.cls_token = cls_token
        self.image_mean = _triple(image_mean, "image_mean")
        self.image_std = _triple(image_std, "image_std")
        self.image_size = _square(image_size)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if self.kind == "timm":
            out = self.encoder.forward_head(self.encoder.forward_features(images), pre_logits=True)
        elif self.kind == "transformers":
            hidden = self.encoder["vision_model"](pixel_values=images)
            out = hidden.last_hidden_state[:, 0] if self.cls_token else hidden.pooler_output
            if "projection" in self.encoder:
                out = self.encoder["projection"](out)
        else:
            out = self.encoder(images)
        if isinstance(out, (tuple, list)):  # e.g. CoCa's visual: (pooled, tokens)
            out = out[0]
        if not isinstance(out, torch.Tensor) or out.dim() != 2:
            raise TypeError(f"the {self.kind} image tower should give (N, D) embeddings, got "
                            f"{getattr(out, 'shape', type(out).__name__)}")
        return out


def _open_clip(model: nn.Module) -> ImageTower:
    visual = model.visual if hasattr(model, "visual") else model
    cfg = getattr(visual, "preprocess_cfg", None) or {}
    mean = cfg.get("mean") or getattr(visual, "image_mean", None) or CLIP_MEAN
    std = cfg.get("std") or getattr(visual, "image_std", None) or CLIP_STD
    return ImageTower("open_clip", visual, getattr(visual, "output_dim", None), True, mean, std,
                      cfg.get("size") or visual.image_size)


def _timm(model: nn.Module) -> ImageTower:
    cfg = getattr(model, "pretrained_cfg", None) or {}
    patch_embed = getattr(model, "patch_embed", None)
    size = getattr(patch_embed, "img_size", None) or cfg.get("input_size", (3, 224, 224))
    dim = getattr(model, "head_hidden_size", None) or getattr(model, "num_features", None)
    return ImageTower("timm", model, dim, False, cfg.get("mean", IMAGENET_MEAN),
                      cfg.get("std", IMAGENET_STD), size)


def _transformers(model: nn.Module, image_mean: Any, image_std: Any) -> ImageTower:
    config = model.config
    vision_config = getattr(config, "vision_config", config)
    model_type = str(getattr(config, "model_type", ""))
    if image_mean is None or image_std is None:
        if not model_type.startswith(_CLIP_NORMALISED):
            raise ValueError(f"cannot tell the normalisation of a transformers {type(model).__name__} "
                             f"(model_type {model_type!r}): give image_mean= and image_std= "
                             f"(its image processor's values)")
        image_mean, image_std = image_mean or CLIP_MEAN, image_std or CLIP_STD
    vision = getattr(model, "vision_model", model)
    projection = getattr(model, "visual_projection", None)
    if projection is None:
        projection = getattr(model, "vision_proj", None)
    dim = projection.out_features if projection is not None else vision_config.hidden_size
    encoder = nn.ModuleDict({"vision_model": vision})
    if projection is not None:
        encoder["projection"] = projection
    # BLIP's retrieval head reads the [CLS] row of last_hidden_state; its pooler_output
    # passes through post_layernorm a second time, so it is not BLIP's image feature
    return ImageTower("transformers", encoder, dim, projection is not None, image_mean, image_std,
                      vision_config.image_size, cls_token=model_type.startswith("blip"))


def wrap_image_tower(tower: nn.Module, *, image_mean: Any = None, image_std: Any = None,
                     image_size: Any = None) -> ImageTower:
    """Recognise ``tower``'s family by its attributes and wrap it.

    * open_clip: a model with ``.visual`` and ``encode_image`` (only ``.visual`` is kept) or
      a ``.visual`` itself (``output_dim`` and ``image_size``): its output, already in the
      image-text space; normalisation from ``visual.preprocess_cfg``.
    * timm: ``forward_features`` + ``forward_head`` + ``pretrained_cfg``: pre-logits
      features (``forward_head(..., pre_logits=True)``), not projected; normalisation from
      ``pretrained_cfg``.
    * transformers: a model with a ``config``: ``CLIPModel`` / ``CLIPVisionModelWithProjection``
      (``visual_projection(pooler_output)``), ``BlipForImageTextRetrieval``
      (``vision_proj(last_hidden_state[:, 0])``, only the vision half is kept),
      ``CLIPVisionModel`` (``pooler_output``) or ``BlipVisionModel``
      (``last_hidden_state[:, 0]``); CLIP/BLIP types normalise with OpenAI CLIP's
      statistics, others need ``image_mean`` / ``image_std``.
    * any other module returning (N, D): only with ``image_mean``, ``image_std`` and
      ``image_size`` given.

    Explicit ``image_mean`` / ``image_std`` / ``image_size`` override what the tower says.
    """
    if isinstance(tower, ImageTower):
        wrapped = tower
    elif hasattr(tower, "visual") and hasattr(tower, "encode_image"):
        wrapped = _open_clip(tower)
    elif hasattr(tower, "forward_features") and hasattr(tower, "forward_head") and hasattr(
            tower, "pretrained_cfg"):
        wrapped = _timm(tower)
    elif hasattr(getattr(tower, "config", None), "model_type"):
        wrapped = _transformers(tower, image_mean, image_std)
    elif hasattr(tower, "output_dim") and hasattr(tower, "image_size"):
        wrapped = _open_clip(tower)
    elif isinstance(tower, nn.Module) and None not in (image_mean, image_std, image_size):
        wrapped = ImageTower("module", tower, None, False, image_mean, image_std, image_size)
    else:
        raise TypeError(
            f"cannot tell what kind of image tower a {type(tower).__name__} is: expected an open_clip "
            f"model or its .visual, a timm model, or a transformers CLIP/BLIP vision model; any other "
            f"module returning (N, D) needs image_mean=, image_std= and image_size=")
    if image_mean is not None:
        wrapped.image_mean = _triple(image_mean, "image_mean")
    if image_std is not None:
        wrapped.image_std = _triple(image_std, "image_std")
    if image_size is not None:
        wrapped.image_size = _square(image_size)
    return wrapped


def build_image_tower(cfg: Mapping[str, Any]) -> nn.Module:
    """A tower from a config dict; ``kind`` picks the library (imported here, not before).

    * ``dict(kind="open_clip", model_name=..., pretrained=None, **create_model_kwargs)``
    * ``dict(kind="timm", model_name=..., pretrained=False, num_classes=0, **create_model_kwargs)``
    * ``dict(kind="transformers", model_class="CLIPVisionModelWithProjection",
      pretrained=<id or folder> | config=<config kwargs>)``: ``from_pretrained`` or random init

    ``pretrained`` weights load only when named (a local path or a hub id); None builds a
    randomly initialised tower.
    """
    cfg = dict(cfg)
    kind = cfg.pop("kind", None)
    if kind == "open_clip":
        import open_clip

        return open_clip.create_model(cfg.pop("model_name"), pretrained=cfg.pop("pretrained", None), **cfg)
    if kind == "timm":
        import timm

        cfg.setdefault("num_classes", 0)
        return timm.create_model(cfg.pop("model_name"), pretrained=cfg.pop("pretrained", False), **cfg)
    if kind == "transformers":
        import transformers

        name = cfg.pop("model_class")
        cls = getattr(transformers, name, None)
        if cls is None:
            raise ValueError(f"transformers has no class {name!r} (tower model_class)")
        pretrained, config = cfg.pop("pretrained", None), cfg.pop("config", None)
        if (pretrained is None) == (config is None):
            raise ValueError(f"a transformers tower needs exactly one of pretrained= or config=, "
                             f"got {'both' if pretrained is not None else 'neither'}")
        if pretrained is not None:
            return cls.from_pretrained(pretrained, **cfg)
        return cls(cls.config_class(**config), **cfg)
    raise ValueError(f"an image tower config needs kind= one of 'open_clip', 'timm', 'transformers', "
                     f"got {kind!r} (keys {sorted(cfg)})")
