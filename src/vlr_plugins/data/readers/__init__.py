"""One reader per benchmark: the official annotation files, as published, into a RetrievalSet.

Every reader validates every record (errors name the file, the record and the field),
can check that all media files exist (``check_media=True``, one error listing every
missing file), and registers itself in :data:`vlr_plugins.registry.READERS`.
"""

# --- image benchmarks -------------------------------------------------------------
from vlr_plugins.data.readers.coco import read_coco_captions, read_coco_karpathy
from vlr_plugins.data.readers.docci import DOCCI_SPLITS, read_docci
from vlr_plugins.data.readers.flickr30k import KARPATHY_SPLITS, read_flickr30k
from vlr_plugins.data.readers.sharegpt4v import PAPER_SAMPLE, read_sharegpt4v

__all__ = [
    "DOCCI_SPLITS",
    "KARPATHY_SPLITS",
    "PAPER_SAMPLE",
    "read_coco_captions",
    "read_coco_karpathy",
    "read_docci",
    "read_flickr30k",
    "read_sharegpt4v",
]

# --- video benchmarks (kept in this block by the video-readers helper) -----------
from vlr_plugins.data.readers.activitynet import read_activitynet
from vlr_plugins.data.readers.carebench import (
    CAREBENCH_CATEGORIES,
    CAREBENCH_TEXT_KINDS,
    read_carebench,
)
from vlr_plugins.data.readers.didemo import read_didemo
from vlr_plugins.data.readers.dream1k import read_dream1k
from vlr_plugins.data.readers.lsmdc import read_lsmdc
from vlr_plugins.data.readers.msrvtt import read_msrvtt
from vlr_plugins.data.readers.msvd import read_msvd
from vlr_plugins.data.readers.shot2story import SHOT2STORY_LEVELS, read_shot2story

__all__ += [
    "CAREBENCH_CATEGORIES",
    "CAREBENCH_TEXT_KINDS",
    "SHOT2STORY_LEVELS",
    "read_activitynet",
    "read_carebench",
    "read_didemo",
    "read_dream1k",
    "read_lsmdc",
    "read_msrvtt",
    "read_msvd",
    "read_shot2story",
]
