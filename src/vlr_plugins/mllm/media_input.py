"""How images and clips reach an MLLM's processor: frame sampling, repetition, pixel limits.

The processor of a chat MLLM resizes and normalises pixels itself, so the wrapper hands
it raw pixels: a video file is decoded to ``num_frames`` frames by
:func:`vlr_plugins.data.video.sample_frames` (``strategy="uniform"`` is CaReBench's rule);
a tensor of frames is taken as given. Float tensors follow the
:class:`~vlr_plugins.vision.protocol.VideoTower` protocol (already normalised with the
tower's ``image_mean`` / ``image_std``) and are mapped back to 0-255 first, so frames
prepared for any tower of the package can be embedded by an MLLM too.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from vlr_plugins.data.video.sampling import FRAME_STRATEGIES

__all__ = ["VideoInput", "clip_pixels", "image_pixels", "media_token_counts", "processor_video_kwargs"]


@dataclass(frozen=True)
class VideoInput:
    """The frames an MLLM sees of a clip, and the pixel limits its processor applies.

    * ``num_frames`` / ``strategy``: frames decoded from a file
      (:func:`~vlr_plugins.data.video.frame_indices`; ``uniform`` = CaReBench, 32 frames).
    * ``frame_repeat``: each frame repeated this many times, in place. CaRe's encoder
      repeats every frame twice, so that each of Qwen2-VL's 2-frame temporal patches holds
      one frame; 1 (no repeat) is how CaReBench encodes with the base Qwen2-VL.
    * ``min_pixels`` / ``max_pixels``: the bounds of each frame's area after the
      processor's resize (aspect ratio kept, sides multiples of the patch grid); passed to
      the processor as ``size={"shortest_edge": min, "longest_edge": max}``. ``None``: the
      processor's defaults. CaReBench resizes to ``max_pixels=230400`` (min 128 x 28 x 28)
      before its processor, which then keeps the size: the same frames.
    * ``backend``: the decoder for files (``pyav`` or ``torchcodec``).
    """

    num_frames: int = 32
    strategy: str = "uniform"
    frame_repeat: int = 1
    min_pixels: int | None = None
    max_pixels: int | None = None
    backend: str = "pyav"

    def __post_init__(self) -> None:
        if self.strategy not in FRAME_STRATEGIES:
            raise ValueError(f"strategy must be one of {FRAME_STRATEGIES}, found {self.strategy!r}")
        for key in ("num_frames", "frame_repeat"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{key} must be an integer >= 1, found {value!r}")
        for key in ("min_pixels", "max_pixels"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{key} must be a positive integer or null, found {value!r}")
        if self.min_pixels and self.max_pixels and self.min_pixels > self.max_pixels:
            raise ValueError(f"min_pixels ({self.min_pixels}) exceeds max_pixels ({self.max_pixels})")

    def size(self, default: dict[str, int] | None) -> dict[str, int] | None:
        """The processor's ``size`` argument for these limits (``None``: keep its own)."""
        if self.min_pixels is None and self.max_pixels is None:
            return None
        out = dict(default or {})
        if self.min_pixels is not None:
            out["shortest_edge"] = self.min_pixels
        if self.max_pixels is not None:
            out["longest_edge"] = self.max_pixels
        return out


def _denormalise(x: torch.Tensor, mean: Sequence[float], std: Sequence[float], where: str) -> torch.Tensor:
    """Normalised float pixels ``(..., 3, H, W)`` -> 0-255 float (what the processor expects)."""
    if x.shape[-3] != 3:
        raise ValueError(f"{where}: expected 3 colour channels at dim -3, found shape {tuple(x.shape)}")
    m = torch.tensor(mean, dtype=torch.float32).view(3, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(3, 1, 1)
    return ((x.float().cpu() * s + m) * 255).clamp(0, 255)


def _pixels(x: torch.Tensor, mean: Sequence[float], std: Sequence[float], where: str) -> torch.Tensor:
    if x.dtype == torch.uint8:
        return x.cpu()
    if x.dtype.is_floating_point:
        return _denormalise(x, mean, std, where)
    raise ValueError(f"{where}: pixels must be uint8 (0-255) or float (normalised), found {x.dtype}")


def clip_pixels(video: str | os.PathLike[str] | torch.Tensor, spec: VideoInput,
                mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """One clip as the processor takes it: ``(T * frame_repeat, 3, H, W)``, uint8 or 0-255 float.

    ``video`` is a file (decoded: ``spec.num_frames`` frames by ``spec.strategy``) or a
    tensor ``(T, 3, H, W)``: uint8 pixels, or floats normalised with ``mean`` / ``std``.
    """
    if isinstance(video, (str, os.PathLike)):
        from vlr_plugins.data.video.decode import sample_frames

        frames = sample_frames(video, spec.num_frames, spec.strategy, backend=spec.backend).permute(0, 3, 1, 2)
    elif isinstance(video, torch.Tensor):
        if video.ndim != 4 or video.shape[1] != 3:
            raise ValueError(f"a clip tensor must be (T, 3, H, W), found shape {tuple(video.shape)}")
        frames = _pixels(video, mean, std, "clip")
    else:
        raise TypeError(f"a video is a file path or a (T, 3, H, W) tensor, found {type(video).__name__}")
    if spec.frame_repeat > 1:
        frames = frames.repeat_interleave(spec.frame_repeat, dim=0)
    return frames


def image_pixels(image: Any, mean: Sequence[float], std: Sequence[float]) -> Any:
    """One image as the processor takes it: a PIL image, or ``(3, H, W)`` uint8 / 0-255 float.

    ``image`` is a file path (opened with PIL, RGB), a PIL image, or a ``(3, H, W)``
    tensor (uint8 pixels, or floats normalised with ``mean`` / ``std``).
    """
    if isinstance(image, (str, os.PathLike)):
        from PIL import Image

        with Image.open(image) as im:
            return im.convert("RGB")
    if isinstance(image, torch.Tensor):
        if image.ndim != 3 or image.shape[0] != 3:
            raise ValueError(f"an image tensor must be (3, H, W), found shape {tuple(image.shape)}")
        return _pixels(image, mean, std, "image")
    if type(image).__module__.startswith("PIL."):
        return image
    raise TypeError(f"an image is a file path, a PIL image or a (3, H, W) tensor, found {type(image).__name__}")


def processor_video_kwargs(processor: Any, spec: VideoInput) -> dict[str, Any]:
    """The processor's keyword arguments for clips under ``spec``: its pixel limits as ``size``,
    the frames given taken as the frames seen (``do_sample_frames=False``), and the limits as
    the whole rule (``cap_pixels_per_frame=False``), as CaReBench resizes."""
    proc = getattr(processor, "video_processor", None)
    kw: dict[str, Any] = {}
    size = spec.size(dict(getattr(proc, "size", None) or {}))
    if size is not None:
        kw["size"] = size
    if hasattr(proc, "cap_pixels_per_frame"):
        kw["cap_pixels_per_frame"] = False
    if hasattr(proc, "do_sample_frames"):
        kw["do_sample_frames"] = False
    return kw


def _height_width(x: Any) -> tuple[int, int]:
    if isinstance(x, torch.Tensor):
        return int(x.shape[-2]), int(x.shape[-1])
    width, height = x.size  # PIL
    return int(height), int(width)


def media_token_counts(processor: Any, modality: str, media: Sequence[Any], kwargs: dict[str, Any]) -> list[int]:
    """How many tokens each prepared image (PIL or ``(3, H, W)``) or clip (``(T, 3, H, W)``)
    becomes in the language model's input, under the processor keyword arguments ``kwargs``
    (:func:`processor_video_kwargs` for clips).

    Asks the processor where it says (Qwen2-VL's and Qwen2.5-VL's image and video processors:
    ``get_number_of_image_patches`` / ``get_num_of_video_patches``, which vLLM relies on too),
    else estimates Qwen2-VL's count from the pixels (14 px patches, 2 x 2 merged, 2 frames per
    temporal patch): the counts order and budget batches, so an estimate costs only padding.
    """
    name = "image_processor" if modality == "image" else "video_processor"
    proc = getattr(processor, name, None)
    merge = int(getattr(proc, "merge_size", None) or 2) ** 2
    out = []
    for x in media:
        height, width = _height_width(x)
        frames = int(x.shape[0]) if modality == "video" else 1
        try:
            if modality == "image":
                patches = proc.get_number_of_image_patches(height, width, {})
            else:
                patches = proc.get_num_of_video_patches(frames, height, width, dict(kwargs))
        except (AttributeError, KeyError, TypeError):
            patches = -(-frames // 2) * max(1, height * width // (14 * 14))
        out.append(max(1, int(patches) // merge))
    return out
