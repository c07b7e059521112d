"""A tiny random CLIP as an open_clip ``local-dir:`` folder: the package's writer
(``python -m vlr_plugins.integrations.open_clip.tiny``), re-exported for the tests."""

from __future__ import annotations

from vlr_plugins.integrations.open_clip.tiny import TINY_CLIP, write_local_dir_model

__all__ = ["TINY_CLIP", "write_local_dir_model"]
