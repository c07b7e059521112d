"""What :func:`~vlr_plugins.data.video.video_info` tells about a video."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["VideoInfo"]


@dataclass(frozen=True)
class VideoInfo:
    """A video stream's exact frame count, frame rate, frame size and codec.

    ``num_frames`` is counted from the file's packets (one per frame), not taken from the
    container's header, which some formats leave empty (Matroska, WebM) or get wrong.
    ``fps`` is the stream's average frame rate; ``duration`` is ``num_frames / fps``, the
    clock :func:`~vlr_plugins.data.video.frame_indices` uses for ``fps`` and windows.
    """

    num_frames: int
    fps: float
    width: int
    height: int
    codec: str

    @property
    def duration(self) -> float:
        """Seconds: ``num_frames / fps``."""
        return self.num_frames / self.fps
