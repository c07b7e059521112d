"""The error a video that cannot be decoded raises, for one ``except`` around bulk work."""

from __future__ import annotations

import os

from vlr_plugins.errors import DataFormatError

__all__ = ["VideoBackendWarning", "VideoDecodeError"]


class VideoDecodeError(DataFormatError):
    """A video file that is missing, unreadable, empty, truncated, not a video, or fails to
    decode; a :class:`~vlr_plugins.errors.DataFormatError`.

    ``str(err)`` reads ``clips/v1.mp4: cannot open the video (pyav): Invalid data found
    when processing input``: the path, then what failed and the decoder's own reason.

    Attributes (besides ``path`` and ``problem``):
        backend: the decoding backend that failed (``"pyav"`` or ``"torchcodec"``).
        reason: the decoder's message alone, for a failures file.
    """

    def __init__(self, path: str | os.PathLike[str], problem: str, *, backend: str, reason: str) -> None:
        self.backend = backend
        self.reason = reason
        super().__init__(path, f"{problem} ({backend}): {reason}")


class VideoBackendWarning(UserWarning):
    """A video the backend asked for does not read right, so another backend reads it:
    torchcodec's frames that are not the ones asked for, read with PyAV instead (the message
    names the file and what torchcodec got wrong). Silence it with
    ``warnings.filterwarnings("ignore", category=VideoBackendWarning)``."""
