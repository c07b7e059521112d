"""An image tower run on every frame, mean-pooled over time (CLIP4Clip's meanP)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vlr_plugins.registry import MODELS
from vlr_plugins.vision.image_tower import build_image_tower, wrap_image_tower

__all__ = ["FramePooledVideoEncoder"]


@MODELS.register
class FramePooledVideoEncoder(nn.Module):
    """Any image tower as a video tower: embed each frame, average over time, project.

    Expects frames (B, T, 3, H, W), normalised with the tower's ``image_mean`` /
    ``image_std`` at ``image_size``. With ``e_t`` the tower's embedding of frame ``t``
    followed by the projection ``P`` (the tower's own, or a Linear to ``embed_dim`` when it
    has none, or nothing):

        video = normalize( mean_t normalize(P e_t) )

    the inner normalisation when ``normalize_frames``, the outer when ``normalize``. That is
    CLIP4Clip's parameter-free mean pooling ("meanP", Luo et al., Neurocomputing 2022,
    "CLIP4Clip", sec. 3.3), the usual way to evaluate an image-text checkpoint (open_clip,
    Long-CLIP, BLIP) on video. An image is a one-frame video, so ``encode_image`` and
    ``encode_video`` share one space.

    ``tower`` is a module (open_clip model or ``.visual``, timm model, transformers
    CLIP/BLIP vision model; see :func:`~vlr_plugins.vision.wrap_image_tower`) or a config
    dict for :func:`~vlr_plugins.vision.build_image_tower` (``dict(kind="open_clip",
    model_name="ViT-B-32", pretrained=None)``). ``projection`` adds a projection to a tower
    without one (e.g. BLIP's ``vision_proj`` beside a ``BlipVisionModel``).
    ``frames_per_pass`` bounds how many frames go through the tower at once.

    Relations: :class:`~vlr_plugins.vision.SpaceTimeViT` attends across frames instead;
    both follow :class:`~vlr_plugins.vision.VideoTower`.

    Example::

        enc = FramePooledVideoEncoder(tower=dict(kind="timm", model_name="vit_tiny_patch16_224",
                                                 img_size=32), embed_dim=16)
        emb = enc.encode_video(torch.randn(2, 4, 3, 32, 32))  # (2, 16), unit norm
    """

    def __init__(
        self,
        tower: nn.Module | dict[str, Any],
        projection: nn.Module | None = None,
        embed_dim: int | None = None,
        normalize: bool = True,
        normalize_frames: bool = True,
        image_mean: tuple[float, float, float] | None = None,
        image_std: tuple[float, float, float] | None = None,
        image_size: int | tuple[int, int] | None = None,
        frames_per_pass: int | None = None,
    ) -> None:
        super().__init__()
        self.tower_config = dict(tower) if isinstance(tower, dict) else None
        module = build_image_tower(tower) if isinstance(tower, dict) else tower
        self.tower = wrap_image_tower(module, image_mean=image_mean, image_std=image_std,
                                      image_size=image_size)
        if projection is not None and self.tower.projects:
            raise ValueError(f"the {self.tower.kind} tower already projects into its image-text "
                             f"space; drop projection=")
        if projection is None and embed_dim is not None:
            if self.tower.projects:
                if self.tower.dim is not None and self.tower.dim != embed_dim:
                    raise ValueError(f"the {self.tower.kind} tower projects to {self.tower.dim} dims, "
                                     f"not embed_dim={embed_dim}")
            elif self.tower.dim is None:
                raise ValueError(f"cannot tell the width of this {self.tower.kind} tower to add a "
                                 f"Linear to embed_dim={embed_dim}: pass projection= instead")
            else:
                projection = nn.Linear(self.tower.dim, embed_dim)
        self.proj = projection if projection is not None else nn.Identity()
        self.embed_dim = getattr(projection, "out_features", None) or self.tower.dim
        self.normalize = normalize
        self.normalize_frames = normalize_frames
        if frames_per_pass is not None and frames_per_pass < 1:
            raise ValueError(f"frames_per_pass must be positive, got {frames_per_pass}")
        self.frames_per_pass = frames_per_pass

    @property
    def image_mean(self) -> tuple[float, float, float]:
        return self.tower.image_mean

    @property
    def image_std(self) -> tuple[float, float, float]:
        return self.tower.image_std

    @property
    def image_size(self) -> int | tuple[int, int]:
        return self.tower.image_size

    def encode_frames(self, frames: torch.Tensor) -> torch.Tensor:
        """frames (B, T, 3, H, W) -> (B, T, D): each frame's projected embedding, not normalised."""
        if frames.dim() != 5:
            raise ValueError(f"frames should be (B, T, 3, H, W), got shape {tuple(frames.shape)}")
        b, t = frames.shape[:2]
        flat = frames.reshape(b * t, *frames.shape[2:])
        step = self.frames_per_pass or flat.shape[0]
        emb = torch.cat([self.proj(self.tower(flat[i:i + step])) for i in range(0, flat.shape[0], step)])
        return emb.reshape(b, t, -1)

    def encode_video(self, frames: torch.Tensor, frame_mask: torch.Tensor | None = None) -> torch.Tensor:
        """frames (B, T, 3, H, W) -> (B, D); ``frame_mask`` (B, T), True for real frames,
        leaves padding frames out of the mean."""
        emb = self.encode_frames(frames)
        if self.normalize_frames:
            emb = F.normalize(emb, dim=-1)
        if frame_mask is None:
            video = emb.mean(dim=1)
        else:
            if frame_mask.shape != emb.shape[:2]:
                raise ValueError(f"frame_mask should be (B, T) = {tuple(emb.shape[:2])}, "
                                 f"got {tuple(frame_mask.shape)}")
            weight = frame_mask.to(emb.dtype)[..., None]
            count = weight.sum(dim=1)
            if bool((count == 0).any()):
                raise ValueError("frame_mask leaves a video without frames")
            video = (emb * weight).sum(dim=1) / count
        return F.normalize(video, dim=-1) if self.normalize else video

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, 3, H, W) -> (B, D): a one-frame video."""
        if images.dim() != 4:
            raise ValueError(f"images should be (B, 3, H, W), got shape {tuple(images.shape)}")
        return self.encode_video(images[:, None])

    def forward(self, frames: torch.Tensor, frame_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Same as :meth:`encode_video`."""
        return self.encode_video(frames, frame_mask)

    def to_config(self) -> dict[str, Any]:
        """A registry config that rebuilds this encoder (towers built from a config dict only)."""
        if self.tower_config is None:
            raise ValueError("this FramePooledVideoEncoder wraps a module, not a tower config; "
                             "build it from tower=dict(kind=...) to get a config")
        if not isinstance(self.proj, (nn.Linear, nn.Identity)):
            raise ValueError(f"a {type(self.proj).__name__} projection cannot be rebuilt from a config; "
                             f"use embed_dim= (a Linear) instead")
        return {"type": type(self).__name__, "tower": dict(self.tower_config),
                "embed_dim": getattr(self.proj, "out_features", None),
                "normalize": self.normalize, "normalize_frames": self.normalize_frames,
                "image_mean": list(self.image_mean), "image_std": list(self.image_std),
                "image_size": self.image_size if isinstance(self.image_size, int) else list(self.image_size),
                "frames_per_pass": self.frames_per_pass}
