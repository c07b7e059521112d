"""What every video tower offers: clips and images in, one embedding per item out.

Retrieval code, frame transforms and evaluation talk to a tower through this protocol
only, so a frame-pooled image model, a space-time ViT and (later) an MLLM wrapper are
interchangeable. A leaf: imports nothing.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

__all__ = ["VideoTower"]


@runtime_checkable
class VideoTower(Protocol):
    """A video (and image) encoder into a shared retrieval space.

    * ``encode_video(frames)``: frames (B, T, 3, H, W), already normalised, -> (B, D).
    * ``encode_image(images)``: images (B, 3, H, W) -> (B, D), in the same space; an image
      is a one-frame video.
    * ``image_mean`` / ``image_std``: per-channel (R, G, B) normalisation the tower was
      trained with, for ``(pixels / 255 - mean) / std``;
    * ``image_size``: the side of the square input (or ``(H, W)``) the tower expects.

    Frame transforms read the three attributes, so the normalisation is never written
    twice. ``isinstance(obj, VideoTower)`` checks the names only, not the shapes.

    Example::

        tower: VideoTower = FramePooledVideoEncoder(tower=open_clip_model)
        emb = tower.encode_video(frames)  # (B, D)
    """

    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    image_size: int | tuple[int, int]

    def encode_video(self, frames: torch.Tensor) -> torch.Tensor: ...

    def encode_image(self, images: torch.Tensor) -> torch.Tensor: ...
