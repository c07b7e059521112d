"""Frame transforms: one random crop and flip per clip for training, resize and centre crop
for evaluation, normalised with the statistics of the tower that reads the frames.

``(T, H, W, 3)`` uint8 frames (as :func:`~vlr_plugins.data.video.read_frames` returns
them) become ``(T, 3, S, S)`` float32. Training follows UMT (``RandomResizedCrop(S,
scale=(0.5, 1))``, bicubic, then a horizontal flip), with the same crop and flip for
every frame of a clip as UMT and VideoMAE do; evaluation resizes the shorter side to S
and crops the centre (CLIP's preprocessing), or squashes to S x S as UMT evaluates
(``eval_resize="squash"``). Built on ``torchvision.transforms.v2``, whose transforms draw
one set of parameters per ``tv_tensors.Video``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = [
    "CLIP_MEAN",
    "CLIP_STD",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "VideoTransform",
    "normalization_of",
    "video_transform",
]

# OpenAI CLIP (open_clip's OPENAI_DATASET_MEAN / STD) and ImageNet (timm's defaults, UMT's ViT)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_EVAL_RESIZES = ("center_crop", "squash")


def _three(values: Any, what: str) -> tuple[float, float, float]:
    try:
        out = tuple(float(v) for v in values)
    except TypeError:
        out = ()
    if len(out) != 3:
        raise ValueError(f"{what} must hold 3 values (R, G, B), found {values!r}")
    return out  # type: ignore[return-value]


def _mean_std(mean: Any, std: Any) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    mean, std = _three(mean, "mean"), _three(std, "std")
    if min(std) <= 0:
        raise ValueError(f"std must be positive, found {std!r}")
    return mean, std


def normalization_of(tower: Any) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """``(mean, std)`` of the images ``tower`` was trained on, read from the tower itself.

    ``tower`` may be:

    * an open_clip model or its ``visual`` tower: ``visual.preprocess_cfg['mean' / 'std']``,
      else the older ``image_mean`` / ``image_std`` attributes;
    * a transformers image processor (``image_mean`` / ``image_std``), or a processor
      holding one as ``image_processor``;
    * a timm model: ``pretrained_cfg['mean' / 'std']`` (``default_cfg`` in older timm);
    * a mapping with ``mean`` and ``std`` (or ``image_mean`` and ``image_std``).

    Example::

        model, _, _ = open_clip.create_model_and_transforms("ViT-B-16", pretrained="openai")
        train = video_transform(True, 224, *normalization_of(model))
    """
    if isinstance(tower, Mapping):
        for m, s in (("mean", "std"), ("image_mean", "image_std")):
            if tower.get(m) is not None and tower.get(s) is not None:
                return _mean_std(tower[m], tower[s])
    else:
        candidates = [tower] + [getattr(tower, a) for a in ("visual", "image_processor")
                                if getattr(tower, a, None) is not None]
        for obj in candidates:
            for attr in ("preprocess_cfg", "pretrained_cfg", "default_cfg"):
                cfg = getattr(obj, attr, None)
                if isinstance(cfg, Mapping) and cfg.get("mean") is not None and cfg.get("std") is not None:
                    return _mean_std(cfg["mean"], cfg["std"])
            mean, std = getattr(obj, "image_mean", None), getattr(obj, "image_std", None)
            if mean is not None and std is not None:
                return _mean_std(mean, std)
    raise ValueError(
        f"cannot find the normalisation of a {type(tower).__name__}: expected an open_clip model "
        "or visual tower (preprocess_cfg, image_mean / image_std), a transformers image processor "
        "(image_mean / image_std), a timm model (pretrained_cfg) or a mapping with 'mean' and 'std'"
    )


class VideoTransform:
    """``(T, H, W, 3)`` uint8 -> ``(T, 3, size, size)`` float32, normalised; made by
    :func:`video_transform`. Picklable, so it travels into data-loader workers."""

    def __init__(self, train: bool, size: int, mean: Sequence[float], std: Sequence[float], *,
                 scale: tuple[float, float] = (0.5, 1.0), eval_resize: str = "center_crop") -> None:
        if eval_resize not in _EVAL_RESIZES:
            raise ValueError(f"eval_resize must be one of {_EVAL_RESIZES}, found {eval_resize!r}")
        if int(size) != size or size < 1:
            raise ValueError(f"size must be a positive integer, found {size!r}")
        self.train, self.size = bool(train), int(size)
        self.scale, self.eval_resize = tuple(scale), eval_resize
        self.mean, self.std = _mean_std(mean, std)
        self._pipeline = self._build()

    def _build(self) -> Any:
        from torchvision.transforms import InterpolationMode, v2

        bicubic = InterpolationMode.BICUBIC
        if self.train:
            geometry = [
                v2.RandomResizedCrop(self.size, scale=self.scale, interpolation=bicubic, antialias=True),
                v2.RandomHorizontalFlip(),
            ]
        elif self.eval_resize == "center_crop":
            geometry = [v2.Resize(self.size, interpolation=bicubic, antialias=True), v2.CenterCrop(self.size)]
        else:
            geometry = [v2.Resize((self.size, self.size), interpolation=bicubic, antialias=True)]
        to_unit = v2.ToDtype(torch.float32, scale=True)
        return v2.Compose([*geometry, to_unit, v2.Normalize(self.mean, self.std)])

    def __call__(self, frames: torch.Tensor) -> torch.Tensor:
        from torchvision import tv_tensors

        if frames.dim() != 4 or frames.shape[-1] != 3 or frames.dtype != torch.uint8:
            raise ValueError(f"expected frames of shape (T, H, W, 3) and dtype uint8, "
                             f"found {tuple(frames.shape)} {frames.dtype}")
        video = tv_tensors.Video(frames.permute(0, 3, 1, 2))
        return self._pipeline(video).as_subclass(torch.Tensor)

    def __repr__(self) -> str:
        kind = f"train, scale={self.scale}" if self.train else f"eval, {self.eval_resize}"
        return f"VideoTransform({kind}, size={self.size}, mean={self.mean}, std={self.std})"


def video_transform(
    train: bool,
    size: int,
    mean: Sequence[float],
    std: Sequence[float],
    *,
    scale: tuple[float, float] = (0.5, 1.0),
    eval_resize: str = "center_crop",
) -> VideoTransform:
    """The frame transform for training (``train=True``) or evaluation, as a callable.

    Args:
        train: random resized crop (area ``scale`` of the frame, aspect 3/4..4/3, bicubic)
            and a horizontal flip with probability 1/2, drawn once per clip; else resize
            the shorter side to ``size`` (bicubic, antialiased) and crop the centre.
        size: S, the output side (224 for ViT-B/16 towers).
        mean, std: the consuming tower's normalisation -- :func:`normalization_of` reads it
            from an open_clip, transformers or timm object; :data:`CLIP_MEAN` /
            :data:`CLIP_STD` and :data:`IMAGENET_MEAN` / :data:`IMAGENET_STD` are the usual
            values. Applied after scaling pixels to [0, 1].
        scale: for training, the range of the crop's area relative to the frame
            (UMT: ``(0.5, 1.0)``).
        eval_resize: ``"center_crop"`` (default) or ``"squash"`` (resize to S x S without
            keeping the aspect ratio, as UMT evaluates).

    Returns a :class:`VideoTransform`: ``(T, H, W, 3)`` uint8 -> ``(T, 3, S, S)`` float32.

    Example::

        frames = sample_frames("v.mp4", 16, "rand")
        clip = video_transform(True, 224, CLIP_MEAN, CLIP_STD)(frames)   # (16, 3, 224, 224)
    """
    return VideoTransform(train, size, mean, std, scale=scale, eval_resize=eval_resize)
