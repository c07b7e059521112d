"""Small test videos written with PyAV at test time, whose every frame is known.

Frame k of a ``(H, W)`` video is :func:`frame_content`: a background colour that changes
with k in every channel, and a white 8 x 8 square at x = 2k (wrapping) -- so any two
frames differ and a decoded frame can be told apart from its neighbours.

Formats (``write_video(path, fmt)``):

* ``ffv1`` -- FFV1 in Matroska, RGB (``bgr0``): lossless, decoded frames equal the
  written ones exactly. Matroska's header lists no frame count (PyAV's ``stream.frames``
  is 0), the case where the count must come from the file's packets.
* ``h264`` -- x264 in MP4, ``qp=0`` (lossless) 4:4:4 YUV, a keyframe every 8 frames and 2
  B-frames (so decoding order differs from presentation order and seeking matters). The
  only loss is the 8-bit RGB -> YUV -> RGB round trip: at most 1 level per channel.
* ``h264_lossy`` -- x264 in MP4, CRF 18, 4:2:0, keyframes every 8, 2 B-frames: what real
  files are like. Not comparable pixel for pixel with the written frames (chroma is
  subsampled at the square's edges); each decoded frame is still nearest to its own.
* ``vp9`` -- lossless VP9 4:4:4 in WebM (header without frame count), keyframes every 8.
"""

from __future__ import annotations

import os

import numpy as np

FORMATS = {
    "ffv1": dict(suffix=".mkv", codec="ffv1", pix_fmt="bgr0", options={}),
    "h264": dict(suffix=".mp4", codec="libx264", pix_fmt="yuv444p", options={"qp": "0", "g": "8", "bf": "2"}),
    "h264_lossy": dict(suffix=".mp4", codec="libx264", pix_fmt="yuv420p",
                       options={"crf": "18", "g": "8", "bf": "2", "sc_threshold": "0"}),
    "vp9": dict(suffix=".webm", codec="libvpx-vp9", pix_fmt="yuv444p", options={"lossless": "1", "g": "8"}),
}
# the most a decoded pixel may differ from the written one, per format (module docstring)
TOLERANCE = {"ffv1": 0, "h264": 1, "vp9": 1}


def frame_content(k: int, height: int = 48, width: int = 64) -> np.ndarray:
    """Frame k: ``(height, width, 3)`` uint8."""
    frame = np.empty((height, width, 3), np.uint8)
    frame[..., 0] = (16 + 7 * k) % 256
    frame[..., 1] = (240 - 5 * k) % 256
    frame[..., 2] = (64 + 11 * k) % 256
    x = (2 * k) % (width - 8)
    frame[8:16, x:x + 8] = 255
    return frame


def video_frames(num_frames: int, height: int = 48, width: int = 64) -> np.ndarray:
    """Every written frame: ``(num_frames, height, width, 3)`` uint8."""
    return np.stack([frame_content(k, height, width) for k in range(num_frames)])


def write_video(path: str | os.PathLike[str], fmt: str = "h264", num_frames: int = 40, *, fps: int = 24,
                height: int = 48, width: int = 64, container_options: dict[str, str] | None = None) -> str:
    """Write ``num_frames`` frames of :func:`frame_content` as ``fmt`` (:data:`FORMATS`);
    ``path`` gets the format's suffix if it has none. Returns the path."""
    import av

    spec = FORMATS[fmt]
    path = os.fspath(path)
    if not os.path.splitext(path)[1]:
        path += spec["suffix"]
    with av.open(path, "w", options=container_options or {}) as container:
        stream = container.add_stream(spec["codec"], rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, spec["pix_fmt"]
        stream.options = dict(spec["options"])
        for k in range(num_frames):
            frame = av.VideoFrame.from_ndarray(frame_content(k, height, width), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


#: files that torchcodec (on Debian 12's FFmpeg 5.1) did not read right, and PyAV did
#: (``write_awkward_video``): MPEG-4 Part 2 with B-frames in AVI, as DivX / Xvid store them
#: ("packed B-frames"); open-GOP H.264; frames whose timestamps collapse into shared ones (a
#: millisecond clock written with a 1/24 s time base)
AWKWARD = {
    "packed_b_avi": dict(suffix=".avi", codec="mpeg4", pix_fmt="yuv420p", options={"g": "7", "bf": "1"}),
    "open_gop": dict(suffix=".mp4", codec="libx264", pix_fmt="yuv420p",
                     options={"g": "4", "bf": "2", "crf": "18", "x264-params": "open-gop=1"}),
    "shared_pts": dict(suffix=".mkv", codec="libvpx-vp9", pix_fmt="yuv420p",
                       options={"g": "11", "deadline": "realtime"}),
}


def write_awkward_video(path: str | os.PathLike[str], kind: str, num_frames: int = 40, fps: int = 30) -> str:
    """One of :data:`AWKWARD`'s files of :func:`frame_content` frames; returns its path."""
    from fractions import Fraction

    import av

    spec = AWKWARD[kind]
    path = os.fspath(path) + spec["suffix"]
    with av.open(path, "w") as container:
        stream = container.add_stream(spec["codec"], rate=24 if kind == "shared_pts" else fps)
        stream.width, stream.height, stream.pix_fmt = 64, 48, spec["pix_fmt"]
        stream.options = dict(spec["options"])
        if kind == "shared_pts":
            stream.time_base = Fraction(1, 1000)
        pts = 0
        for k in range(num_frames):
            frame = av.VideoFrame.from_ndarray(frame_content(k), format="rgb24")
            if kind == "shared_pts":  # 20-100 ms apart, on a 1/24 s encoder clock: some fall together
                frame.pts, frame.time_base = pts, Fraction(1, 1000)
                pts += (20, 40, 41, 100)[k % 4]
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def nearest_written_frame(decoded: np.ndarray, num_frames: int) -> int:
    """Which written frame k a decoded ``(H, W, 3)`` frame is closest to (mean absolute error)."""
    written = video_frames(num_frames, *decoded.shape[:2]).astype(np.int16)
    errors = np.abs(written - decoded.astype(np.int16)).mean(axis=(1, 2, 3))
    return int(errors.argmin())


def write_audio_only(path: str | os.PathLike[str]) -> str:
    """A WAV file: a container FFmpeg opens, holding no video stream."""
    import av

    path = os.fspath(path)
    with av.open(path, "w") as container:
        stream = container.add_stream("pcm_s16le", rate=8000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 800), np.int16), format="s16", layout="mono")
        frame.sample_rate = 8000
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def torchcodec_missing() -> str | None:
    """Why torchcodec's decoder cannot load here (no package, or no FFmpeg libraries), or None."""
    try:
        from vlr_plugins.data.video._torchcodec import torchcodec_decoder_class

        torchcodec_decoder_class()
    except Exception as e:  # ImportError; RuntimeError/OSError when FFmpeg's shared libraries are missing
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return f"torchcodec cannot load: {type(e).__name__}: {first}"
    return None
