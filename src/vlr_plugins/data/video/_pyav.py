"""The PyAV backend: an exact frame index from the packets, then seek-and-verify decoding.

Opening a file reads every packet of its video stream (demuxing only, no decoding: cheap
next to decoding) to learn each frame's presentation timestamp (pts) and which packets
are keyframes. Frame i is the frame with the i-th smallest pts -- the i-th frame a
decoder outputs -- so the count is exact whatever the header says. To read a frame the
decoder seeks to the last keyframe at or before it and decodes forward to the frame
whose pts is the one asked for; it keeps decoding instead of seeking when no keyframe
lies between the last frame decoded and the next one wanted. A frame that seeking does
not reach is read again by decoding from the start, so results are exact even where a
container's seeking is not. Streams whose packets carry no pts are decoded from the
start and counted. Frames are turned upright by the stream's display rotation, as
torchcodec does.

Each opened video converts its frames to RGB with a scaler of its own, not PyAV's
per-thread one: PyAV 18.1.1 keeps that one (and FFmpeg's scaling threads) for the
thread's lifetime, so a DataLoader worker forked after the parent had converted a frame
inherited a scaler whose threads it does not have, and hung on its first frame.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from vlr_plugins.data.video.errors import VideoDecodeError
from vlr_plugins.data.video.info import VideoInfo

__all__ = ["PyAVVideo", "frame_times"]

BACKEND = "pyav"


def _reason(e: BaseException) -> str:
    """FFmpeg's message without PyAV's errno prefix and file name."""
    return getattr(e, "strerror", None) or f"{type(e).__name__}: {e}"


class _NoTimestamps(Exception):
    """A decoded frame without pts: fall back to counting frames."""


def _packet_index(container: Any, stream: Any) -> tuple[list[int | None], list[int], int]:
    """Demuxing ``stream`` (no decoding): the pts of each frame's packet in file order (None where a
    packet has none), the keyframes' pts, and the number of packets (discarded ones included)."""
    pts: list[int | None] = []
    keyframes: list[int] = []  # their pts: FFmpeg seeks MP4, Matroska, WebM by pts
    packets = 0
    for packet in container.demux(stream):
        if not packet.size:  # the empty packet that ends demuxing
            continue
        packets += 1
        if packet.is_discard:  # outside an edit list: the decoder drops it
            continue
        pts.append(packet.pts)
        if packet.is_keyframe and packet.pts is not None:
            keyframes.append(packet.pts)
    return pts, keyframes, packets


def frame_times(path: str | os.PathLike[str]) -> list[float] | None:
    """The presentation time in seconds of each frame of the file's first video stream, in
    order, from its packets alone (demuxing, no decoding): the index :class:`PyAVVideo` finds
    frames by. None where the packets do not give every frame a timestamp of its own (frames
    are then known only by counting them); a :class:`VideoDecodeError` where the file cannot
    be demuxed."""
    import av

    path = os.fspath(path)
    try:
        with av.open(path) as container:
            if not container.streams.video:
                raise VideoDecodeError(path, "cannot open the video", backend=BACKEND,
                                       reason="the file has no video stream")
            stream = container.streams.video[0]
            pts, _, _ = _packet_index(container, stream)
            base = stream.time_base
    except VideoDecodeError:
        raise
    except Exception as e:
        raise VideoDecodeError(path, "cannot read the video's packets", backend=BACKEND, reason=_reason(e)) from e
    if not pts or None in pts or len(set(pts)) != len(pts) or base is None:
        return None
    num, den = base.numerator, base.denominator
    return [t * num / den for t in sorted(pts)]  # type: ignore[operator]  # int / int: correctly rounded


class PyAVVideo:
    """One video file opened with PyAV; ``info`` and ``read(indices)``. Close it (or use
    ``with``) to release the file. ``frames_decoded`` counts the frames decoded so far (the
    cost of the reads)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self.frames_decoded = 0
        self._scaler: Any = None  # made on the first frame; never shared with another video
        self._container = self._open()
        try:
            self._index()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ opening, index

    def _fail(self, problem: str, e: BaseException | str) -> VideoDecodeError:
        reason = e if isinstance(e, str) else _reason(e)
        return VideoDecodeError(self.path, problem, backend=BACKEND, reason=reason)

    def _open(self) -> Any:
        import av

        try:
            container = av.open(self.path)
        except Exception as e:  # av.FFmpegError, OSError (missing, a directory), ValueError
            raise self._fail("cannot open the video", e) from e
        if not container.streams.video:
            kinds = sorted({s.type for s in container.streams}) or ["none"]
            container.close()
            raise self._fail("cannot open the video",
                             f"the file has no video stream (streams: {', '.join(kinds)})")
        self._stream = container.streams.video[0]
        return container

    def _index(self) -> None:
        stream = self._stream
        try:
            pts, keyframes, packets = _packet_index(self._container, stream)
        except Exception as e:
            raise self._fail("cannot read the video's packets", e) from e
        declared = stream.frames
        if declared and packets < declared:
            raise self._fail("the video is truncated or damaged",
                             f"its header lists {declared} frames but the file holds only {packets}")
        if not pts:
            raise self._fail("the video is empty", "its video stream has no frame")
        rate = stream.average_rate or stream.guessed_rate
        if rate is None:
            raise self._fail("cannot read the video", "its stream gives no frame rate")
        self._fps = float(rate)
        self._codec = stream.codec_context.name
        if None in pts or len(set(pts)) != len(pts):
            self._pts = None  # frames are found by counting, not by timestamp
            frames = self._decode_from_start()
        else:
            self._pts = sorted(pts)
            self._key_pts = sorted(keyframes)
            frames = self._decode_from(self._key_pts[0]) if self._key_pts else self._decode_from_start()
        first = next(frames, None)
        if first is None:
            raise self._fail("the video is empty", "no frame could be decoded")
        # the size of the frames as returned: rotated upright, as torchcodec returns them
        height, width = self._rgb(first).shape[:2]
        self._size = (width, height)
        self._count = len(self._pts) if self._pts is not None else 1 + sum(1 for _ in frames)

    @property
    def info(self) -> VideoInfo:
        return VideoInfo(num_frames=self._count, fps=self._fps, width=self._size[0],
                         height=self._size[1], codec=self._codec)

    # ------------------------------------------------------------------ decoding

    def _decode_from_start(self) -> Iterator[Any]:
        """Every frame from the first, in presentation order (a fresh container: no seek)."""
        self._container.close()
        self._container = self._open()
        return self._decode()

    def _decode_from(self, seek_ts: int) -> Iterator[Any]:
        try:
            self._container.seek(seek_ts, backward=True, any_frame=False, stream=self._stream)
        except Exception as e:
            raise self._fail("cannot seek in the video", e) from e
        return self._decode()

    def _decode(self) -> Iterator[Any]:
        try:
            for frame in self._container.decode(self._stream):
                self.frames_decoded += 1
                yield frame
        except Exception as e:
            raise self._fail("cannot decode the video", e) from e

    def _rgb(self, frame: Any) -> torch.Tensor:
        """``(H, W, 3)`` uint8, turned upright by the display matrix's rotation (phone videos)."""
        if self._scaler is None:
            from av.video.reformatter import VideoReformatter

            self._scaler = VideoReformatter()
        rgb = self._scaler.reformat(frame, format="rgb24").to_ndarray()
        turns = round(frame.rotation / 90) % 4  # counter-clockwise quarter turns
        if turns:
            rgb = np.ascontiguousarray(np.rot90(rgb, turns))
        return torch.from_numpy(rgb)

    def read(self, indices: Sequence[int]) -> dict[int, torch.Tensor]:
        """``{index: (H, W, 3) uint8}`` for the distinct, in-range ``indices``."""
        wanted = sorted(set(indices))
        if self._pts is not None:
            try:
                return self._read_by_seeking(wanted)
            except _NoTimestamps:
                self._pts = None
        return self._read_by_counting(wanted)

    def _read_by_seeking(self, wanted: list[int]) -> dict[int, torch.Tensor]:
        index_of = {self._pts[i]: i for i in wanted}
        frames: dict[int, torch.Tensor] = {}
        decoder: Iterator[Any] | None = None
        last_pts: int | None = None
        for i in wanted:
            if i in frames:
                continue
            target = self._pts[i]
            k = bisect.bisect_right(self._key_pts, target) - 1
            if decoder is None or (k >= 0 and self._key_pts[k] > last_pts):
                decoder = self._decode_from(self._key_pts[k]) if k >= 0 else self._decode_from_start()
            for frame in decoder:
                if frame.pts is None:
                    raise _NoTimestamps
                last_pts = frame.pts
                j = index_of.get(frame.pts)
                if j is not None and j not in frames:
                    frames[j] = self._rgb(frame)
                if frame.pts >= target:
                    break
            if i not in frames:  # seeking landed past the frame, or the stream ended early
                return self._read_by_counting(wanted, by_pts=True)
        return frames

    def _read_by_counting(self, wanted: list[int], by_pts: bool = False) -> dict[int, torch.Tensor]:
        """Decode from the first frame; frame i is the i-th decoded (or has the i-th pts)."""
        index_of = {self._pts[i]: i for i in wanted} if by_pts else None
        wanted_set, frames = set(wanted), {}
        for n, frame in enumerate(self._decode_from_start()):
            j = n if index_of is None else index_of.get(frame.pts)
            if j in wanted_set:
                frames[j] = self._rgb(frame)
                if len(frames) == len(wanted_set):
                    return frames
        missing = sorted(wanted_set - set(frames))
        raise self._fail("the video is truncated or damaged",
                         f"frame(s) {missing[:5]} of {self._count} could not be decoded")

    def close(self) -> None:
        self._scaler = None  # FFmpeg 8 keeps a scaler's graph (MBs) until it is freed
        container, self._container = getattr(self, "_container", None), None
        if container is not None:
            container.close()

    def __enter__(self) -> PyAVVideo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
