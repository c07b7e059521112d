"""Video frames for training and evaluation: sampling rules, decoding, frame transforms.

Importing this package needs only torch: PyAV, torchcodec and torchvision are imported
by the functions that use them (install ``vlr-plugins[video]``). See docs/video.md.
"""

from vlr_plugins.data.video.decode import VIDEO_BACKENDS, read_frames, sample_frames, video_info
from vlr_plugins.data.video.errors import VideoDecodeError
from vlr_plugins.data.video.info import VideoInfo
from vlr_plugins.data.video.sampling import CLIP_SAMPLERS, FRAME_STRATEGIES, frame_indices, window_frames
from vlr_plugins.data.video.transforms import (
    CLIP_MEAN,
    CLIP_STD,
    IMAGENET_MEAN,
    IMAGENET_STD,
    normalization_of,
    video_transform,
)

__all__ = [
    "CLIP_SAMPLERS",
    "FRAME_STRATEGIES",
    "frame_indices",
    "window_frames",
    "VIDEO_BACKENDS",
    "VideoInfo",
    "VideoDecodeError",
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
