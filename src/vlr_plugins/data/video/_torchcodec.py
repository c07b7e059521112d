"""The torchcodec backend: ``VideoDecoder(seek_mode="exact")``, which scans the file for an
exact frame index (as the PyAV backend does) and seeks to the frames asked for.

Its frames are checked against the index the PyAV backend finds frames by (each frame's
timestamp, from the packets: :func:`~vlr_plugins.data.video._pyav.frame_times`), because
torchcodec does not read every file right: on Debian 12's FFmpeg 5.1, in 400 random small
files, it returned other frames than those asked for (their neighbours) in MPEG-4 Part 2
with B-frames in AVI (DivX / Xvid "packed B-frames"), and failed near the end of open-GOP
H.264, where PyAV read every one. Where torchcodec counts other frames than the packets
hold, gives frames no timestamps of their own, fails to decode, or returns a frame whose
timestamp is not the one asked for, that file is read with the PyAV backend instead and a
:class:`~vlr_plugins.data.video.VideoBackendWarning` names it.

torchcodec links against the system's FFmpeg shared libraries (4 to 9); without them
importing its decoders fails (older torchcodec) or torchcodec imports with no FFmpeg loaded
(``ffmpeg_major_version`` None, newer torchcodec), and this backend says so with an
``ImportError`` either way, before any video is opened.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from vlr_plugins.data.video._pyav import PyAVVideo, frame_times
from vlr_plugins.data.video.errors import VideoBackendWarning, VideoDecodeError
from vlr_plugins.data.video.info import VideoInfo

__all__ = ["TorchCodecVideo", "torchcodec_decoder_class"]

BACKEND = "torchcodec"
# torchcodec prefixes its C++ errors with "function, /path/to/file.cpp:123, "
_CPP_PREFIX = re.compile(r"^\w+, \S+:\d+, ")
#: seconds within which a returned frame's timestamp is the one asked for (both are pts x time
#: base in float64, rounded differently)
_SAME_TIME = 1e-6


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
    """One video file opened with torchcodec; ``info`` and ``read(indices)``, checked against
    the packets' timestamps and read with :class:`PyAVVideo` where torchcodec gets it wrong
    (see the module)."""

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
        self._pyav: PyAVVideo | None = None
        try:
            self._times = frame_times(self.path)
        except VideoDecodeError:  # PyAV cannot demux what torchcodec opened: nothing to check against
            self._times, self._checked = None, False
        else:
            self._checked = True
        why = None
        if self._checked and self._times is None:
            why = "cannot tell its frames apart: they share timestamps (PyAV counts them)"
        elif self._times is not None and len(self._times) != count:
            why = f"counts {count} frames where the file's packets hold {len(self._times)}"
        if why is not None:
            self._info = self._read_with_pyav(why).info  # PyAV's count, rate and size, as its frames

    def _read_with_pyav(self, why: str, cause: BaseException | None = None) -> PyAVVideo:
        """Read this file with the PyAV backend from now on, warning why; where PyAV cannot read
        it either, torchcodec's error (``cause``), else PyAV's."""
        try:
            self._pyav = PyAVVideo(self.path)
        except VideoDecodeError:
            if cause is not None:
                raise self._fail("cannot decode the video", cause) from cause
            raise
        warnings.warn(VideoBackendWarning(f"{self.path}: torchcodec {why}; its frames are read with PyAV "
                                          "instead (backend='pyav')"), stacklevel=3)
        return self._pyav

    def _fail(self, problem: str, e: BaseException | str) -> VideoDecodeError:
        reason = e if isinstance(e, str) else _reason(e)
        return VideoDecodeError(self.path, problem, backend=BACKEND, reason=reason)

    @property
    def info(self) -> VideoInfo:
        return self._info

    def read(self, indices: Sequence[int]) -> dict[int, torch.Tensor]:
        """``{index: (H, W, 3) uint8}`` for the distinct, in-range ``indices``."""
        wanted = sorted(set(indices))
        if self._pyav is not None:
            return self._pyav.read(wanted)
        try:
            batch = self._decoder.get_frames_at(wanted)
        except Exception as e:
            if not self._checked:
                raise self._fail("cannot decode the video", e) from e
            frames = f"{wanted[:4]}{'...' if len(wanted) > 4 else ''}"
            return self._read_with_pyav(f"failed to decode frames {frames}: {_reason(e)}", e).read(wanted)
        if self._times is not None:
            for i, t in zip(wanted, batch.pts_seconds.tolist()):
                if abs(t - self._times[i]) > _SAME_TIME:
                    return self._read_with_pyav(f"returned the frame at {t:.6g} s for frame {i}, which is at "
                                                f"{self._times[i]:.6g} s").read(wanted)
        return dict(zip(wanted, batch.data.unbind(0)))

    def close(self) -> None:
        self._decoder = None
        if self._pyav is not None:
            self._pyav.close()

    def __enter__(self) -> TorchCodecVideo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
