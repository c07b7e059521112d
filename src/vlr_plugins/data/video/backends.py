"""The video decoding backends :func:`~vlr_plugins.data.video.read_frames` takes by name (a
command's ``--video-backend``), apart from the decoders so that a parser offers them without
importing torch."""

from __future__ import annotations

__all__ = ["VIDEO_BACKENDS"]

VIDEO_BACKENDS = ("pyav", "torchcodec")
