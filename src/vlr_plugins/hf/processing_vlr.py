"""The processor of an MVC export: its tokenizer and its video processor as one ``AutoProcessor``.

``processor(text=texts)`` tokenizes, ``processor(videos=clips)`` makes ``pixel_values_videos``
with the folder's :class:`VlrVideoProcessor` (``video_processing_vlr.py``), as each does
alone; sentence-transformers loads the folder's processor through ``AutoProcessor`` and routes
texts and videos to it (``sentence_transformers_towers``).

This file is copied beside exported weights and imported where vlr-plugins is not
installed: it imports only ``transformers``.
"""

from __future__ import annotations

from typing import Any

from transformers import ProcessorMixin

__all__ = ["VlrVideoTextProcessor"]


class VlrVideoTextProcessor(ProcessorMixin):
    """``video_processor`` (the export's ``VlrVideoProcessor``) + ``tokenizer``; texts and videos
    are processed by their own part, with the per-modality keyword arguments transformers passes."""

    attributes = ["video_processor", "tokenizer"]

    def __init__(self, video_processor: Any = None, tokenizer: Any = None, **kwargs: Any) -> None:
        super().__init__(video_processor, tokenizer, **kwargs)
