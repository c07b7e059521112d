"""Video frames for training and evaluation: sampling rules, decoding, frame transforms.

Names are resolved on first use (the sampling rules and backend names import no torch); the
decoders and transforms need only torch: PyAV, torchcodec and torchvision are imported
by the functions that use them (install ``vlr-plugins[video]``). See docs/video.md.
"""

from __future__ import annotations

from vlr_plugins._lazy import lazy_exports

__all__ = [
    "CLIP_SAMPLERS",
    "FRAME_STRATEGIES",
    "frame_indices",
    "window_frames",
    "VIDEO_BACKENDS",
    "VideoInfo",
    "VideoDecodeError",
    "VideoBackendWarning",
    "video_info",
    "read_frames",
    "sample_frames",
    "video_transform",
    "normalization_of",
    "CLIP_MEAN",
    "CLIP_STD",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
]

_LAZY = {name: f"vlr_plugins.data.video.{module}" for module, names in {
    "backends": ("VIDEO_BACKENDS",),
    "decode": ("read_frames", "sample_frames", "video_info"),
    "errors": ("VideoBackendWarning", "VideoDecodeError"),
    "info": ("VideoInfo",),
    "sampling": ("CLIP_SAMPLERS", "FRAME_STRATEGIES", "frame_indices", "window_frames"),
    "transforms": ("CLIP_MEAN", "CLIP_STD", "IMAGENET_MEAN", "IMAGENET_STD", "normalization_of",
                   "video_transform"),
}.items() for name in names}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
