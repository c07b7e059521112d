"""Decoding video frames: exact frame counts, the frames asked for, two backends.

* :func:`video_info` -- exact frame count, frame rate, size and codec.
* :func:`read_frames` -- given frames as one ``(T, H, W, 3)`` uint8 tensor, RGB.
* :func:`sample_frames` -- :func:`~vlr_plugins.data.video.frame_indices` and
  :func:`read_frames` on one opened file.

``backend="pyav"`` (the default; PyAV's wheels carry FFmpeg) or ``"torchcodec"`` (seeking
in C++ on the system's FFmpeg libraries; slower than PyAV in docs/benchmarks.md). Both
index every frame of the file before decoding and return the same frames: torchcodec's are
checked against the packets' timestamps, and a file it gets wrong is read with PyAV (a
:class:`~vlr_plugins.data.video.VideoBackendWarning` says so). What each does is in
docs/video.md. A file that cannot be read raises :class:`~vlr_plugins.data.video.VideoDecodeError` (a
:class:`~vlr_plugins.errors.DataFormatError`) naming the path and the decoder's reason.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from vlr_plugins.data.video._pyav import PyAVVideo
from vlr_plugins.data.video._torchcodec import TorchCodecVideo
from vlr_plugins.data.video.backends import VIDEO_BACKENDS
from vlr_plugins.data.video.info import VideoInfo
from vlr_plugins.data.video.sampling import frame_indices

__all__ = ["VIDEO_BACKENDS", "read_frames", "sample_frames", "video_info"]


def _open(path: str | os.PathLike[str], backend: str) -> PyAVVideo | TorchCodecVideo:
    if backend == "pyav":
        return PyAVVideo(path)
    if backend == "torchcodec":
        return TorchCodecVideo(path)
    raise ValueError(f"unknown video backend {backend!r}; expected one of {VIDEO_BACKENDS}")


def _read(video: PyAVVideo | TorchCodecVideo, indices: Sequence[int]) -> torch.Tensor:
    count = video.info.num_frames
    bad = [i for i in indices if not 0 <= i < count]
    if bad:
        raise IndexError(f"{video.path}: frame index {bad[0]} out of range; "
                         f"the video has {count} frames (0..{count - 1})")
    if len(indices) == 0:
        return torch.empty(0, video.info.height, video.info.width, 3, dtype=torch.uint8)
    frames = video.read(indices)
    return torch.stack([frames[i] for i in indices])


def video_info(path: str | os.PathLike[str], *, backend: str = "pyav") -> VideoInfo:
    """The video's exact frame count, frame rate, size and codec (:class:`VideoInfo`).

    The count comes from the file's packets, so it is right for containers whose header
    has none (Matroska, WebM) and it matches what :func:`read_frames` can read; a file
    holding fewer frames than its header lists is reported as truncated.

    Raises:
        VideoDecodeError: the file is missing, unreadable, empty, truncated or not a video.
    """
    with _open(path, backend) as video:
        return video.info


def read_frames(path: str | os.PathLike[str], indices: Sequence[int] | None = None, *,
                backend: str = "pyav") -> torch.Tensor:
    """Frames ``indices`` of the video (all frames if ``None``): ``(T, H, W, 3)`` uint8, RGB.

    Frame i is the i-th frame in presentation order (the i-th the decoder outputs).
    Indices may repeat and come in any order; the result follows them. Only what is
    needed is decoded: each frame from the keyframe before it, or onward from the last
    frame decoded when that is closer; the frame returned is the one whose timestamp is
    the i-th, checked, not assumed from the seek.

    Raises:
        VideoDecodeError: the file cannot be opened or decoded.
        IndexError: an index outside ``0 .. num_frames - 1``.
    """
    with _open(path, backend) as video:
        return _read(video, range(video.info.num_frames) if indices is None else list(indices))


def sample_frames(
    path: str | os.PathLike[str],
    num_samples: int | None,
    strategy: str = "middle",
    *,
    seed: int | None = None,
    fps: float | None = None,
    window: Sequence[float | None] | None = None,
    backend: str = "pyav",
) -> torch.Tensor:
    """``num_samples`` frames picked by ``strategy``: ``(T, H, W, 3)`` uint8, RGB.

    :func:`~vlr_plugins.data.video.frame_indices` on the video's exact frame count and
    frame rate (arguments as there: ``seed`` for ``rand``, ``fps`` for ``fps``, ``window``
    in seconds for a shot or a moment), then :func:`read_frames`, with the file opened
    once. Example: 16 training frames as MVC / UMT, 32 evaluation frames as CaReBench::

        sample_frames("v.mp4", 16, "rand")            # (16, H, W, 3)
        sample_frames("v.mp4", 32, "uniform")
        sample_frames("v.mp4", 8, "middle", window=(12.0, 17.5))   # one shot

    Raises:
        VideoDecodeError: the file cannot be opened or decoded.
        ValueError: a bad strategy, count or window (e.g. one starting after the video).
    """
    with _open(path, backend) as video:
        info = video.info
        indices = frame_indices(info.num_frames, num_samples, strategy, seed=seed, fps=fps,
                                video_fps=info.fps, window=window)
        return _read(video, indices)
