"""The torchcodec backend: ``VideoDecoder(seek_mode="exact")``, which scans the file for an
exact frame index (as the PyAV backend does) and seeks to the frames asked for.

torchcodec links against the system's FFmpeg shared libraries (4 to 9); without them
importing its decoders fails (older torchcodec) or torchcodec imports with no FFmpeg loaded
(``ffmpeg_major_version`` None, newer torchcodec), and this backend says so with an
``ImportError`` either way, before any video is opened.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

import torch

from vlr_plugins.data.video.errors import VideoDecodeError
from vlr_plugins.data.video.info import VideoInfo

__all__ = ["TorchCodecVideo", "torchcodec_decoder_class"]

BACKEND = "torchcodec"
# torchcodec prefixes its C++ errors with "function, /path/to/file.cpp:123, "
_CPP_PREFIX = re.compile(r"^\w+, \S+:\d+, ")


def torchcodec_decoder_class() -> Any:
    """``torchcodec.decoders.VideoDecoder``, or an ``ImportError`` saying why it cannot load."""
    try:
        from torchcodec.decoders import VideoDecoder

        _check_ffmpeg_loaded()
    except Exception as e:  # ImportError, or RuntimeError/OSError when FFmpeg's libraries are missing
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ImportError(
            "the 'torchcodec' video backend needs `pip install torchcodec` (a build matching torch) "
            "and FFmpeg's shared libraries (Debian/Ubuntu: scripts/install_ffmpeg_libs.sh, or "
            "apt-get install ffmpeg; docs/video.md); backend='pyav' needs neither. Loading it "
            f"failed: {type(e).__name__}: {first_line}"
        ) from e
    return VideoDecoder


def _check_ffmpeg_loaded() -> None:
    """Newer torchcodec imports without FFmpeg's libraries (it then sets ``ffmpeg_major_version``
    to None) and fails at the first decoder: refuse it here, before any video is opened."""
    import torchcodec

    if hasattr(torchcodec, "ffmpeg_major_version") and torchcodec.ffmpeg_major_version is None:
        raise RuntimeError("Could not load libtorchcodec: FFmpeg's shared libraries (versions 4 to 9) were not found")


def _reason(e: BaseException) -> str:
    text = str(e).strip()
    if "best video stream" in text:
        return "the file has no video stream"
    return _CPP_PREFIX.sub("", text.splitlines()[0] if text else type(e).__name__)


class TorchCodecVideo:
    """One video file opened with torchcodec; ``info`` and ``read(indices)``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        decoder_class = torchcodec_decoder_class()
        try:
            self._decoder = decoder_class(self.path, seek_mode="exact", dimension_order="NHWC")
            metadata = self._decoder.metadata
        except Exception as e:
            raise self._fail("cannot open the video", e) from e
        count = metadata.num_frames_from_content
        declared = metadata.num_frames_from_header
        if declared and count is not None and count < declared:
            raise self._fail("the video is truncated or damaged",
                             f"its header lists {declared} frames but the file holds only {count}")
        if not count:
            raise self._fail("the video is empty", "its video stream has no frame")
        fps = metadata.average_fps_from_header or metadata.average_fps
        self._info = VideoInfo(num_frames=count, fps=float(fps), width=metadata.width,
                               height=metadata.height, codec=metadata.codec or "")

    def _fail(self, problem: str, e: BaseException | str) -> VideoDecodeError:
        reason = e if isinstance(e, str) else _reason(e)
        return VideoDecodeError(self.path, problem, backend=BACKEND, reason=reason)

    @property
    def info(self) -> VideoInfo:
        return self._info

    def read(self, indices: Sequence[int]) -> dict[int, torch.Tensor]:
        """``{index: (H, W, 3) uint8}`` for the distinct, in-range ``indices``."""
        wanted = sorted(set(indices))
        try:
            batch = self._decoder.get_frames_at(wanted).data
        except Exception as e:
            raise self._fail("cannot decode the video", e) from e
        return dict(zip(wanted, batch.unbind(0)))

    def close(self) -> None:
        self._decoder = None

    def __enter__(self) -> TorchCodecVideo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
