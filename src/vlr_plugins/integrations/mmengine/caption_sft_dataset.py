"""Stage-I data in the ``vlr_plugins`` scope: the core caption-SFT dataset and its collate.

Declarations only (as mmpretrain declares shared datasets): the work is
:class:`vlr_plugins.mllm.caption_sft.VideoCaptionSFTDataset` and
:func:`vlr_plugins.mllm.caption_sft.collate_caption_sft`.
"""

from __future__ import annotations

from vlr_plugins.integrations.mmengine.registry import DATASETS, FUNCTIONS
from vlr_plugins.mllm.caption_sft import VideoCaptionSFTDataset, collate_caption_sft

__all__ = ["VideoCaptionSFTDataset", "vlr_caption_sft_collate"]

DATASETS.register_module(name="VideoCaptionSFTDataset", module=VideoCaptionSFTDataset)
#: configs name it with its scope: ``collate_fn=dict(type="vlr_plugins.vlr_caption_sft_collate")``
vlr_caption_sft_collate = collate_caption_sft
FUNCTIONS.register_module(name="vlr_caption_sft_collate", module=collate_caption_sft)
