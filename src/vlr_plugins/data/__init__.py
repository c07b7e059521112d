"""Training data: samples with their texts (paragraph supervision, multi-view captions), text
views, media sources (stored embeddings, image files, video clips), embedding stores, video frames
(sampling, decoding, transforms), the one text-views dataset every trainer adapts and the
batches that hold mined hard negatives (any trainer's batch sampler). What
is built on them (precompute, the demos) lives in :mod:`vlr_plugins.precompute` and
:mod:`vlr_plugins.demo`; this package imports neither.

Names are resolved on first use, so ``import vlr_plugins.data`` imports nothing but the
standard library (``vlr --help`` and a command's refusals stay fast); the modules need only
torch, and safetensors, pyarrow, PIL, transformers, PyAV, torchcodec and torchvision are
imported by the functions that use them.
"""

from __future__ import annotations

from vlr_plugins._lazy import lazy_exports

__all__ = [
    "ParagraphSample",
    "SAMPLE_SUFFIXES",
    "TEXT_FIELDS",
    "read_paragraph_samples",
    "sample_from_record",
    "write_paragraph_samples",
    "MVCSample",
    "MVC_TEXT_FIELDS",
    "MVC_SUMMARY_FIELDS",
    "MVC_DETAILED_FIELDS",
    "MVC_SAMPLE_SUFFIXES",
    "read_mvc_samples",
    "mvc_sample_from_record",
    "write_mvc_samples",
    "SAMPLE_SCHEMAS",
    "text_fields",
    "TextView",
    "TextViews",
    "TextViewsDataset",
    "TextViewsItem",
    "concat_owned",
    "draw_item",
    "owner_index",
    "HardNegativeBatchSampler",
    "negative_indices",
    "batches_per_replica",
    "MediaSource",
    "StoredEmbeddings",
    "ImageFiles",
    "VideoClips",
    "CLIP_SAMPLERS",
    "EmbeddingStore",
    "EmbeddingStoreWriter",
    "check_store_target",
    "ResumableEmbeddingStoreWriter",
    "StoreProgress",
    "check_resumable_target",
    "read_store_progress",
    "work_dir_of",
    "RetrievalSet",
    "read_retrieval_jsonl",
    "DrawnText",
    "draw_texts",
    "check_samples_have_views",
    "FRAME_STRATEGIES",
    "frame_indices",
    "window_frames",
    "VIDEO_BACKENDS",
    "VideoInfo",
    "VideoDecodeError",
    "VideoBackendWarning",
    "video_info",
    "read_frames",
    "sample_frames",
    "video_transform",
    "normalization_of",
    "CLIP_MEAN",
    "CLIP_STD",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "NLI_COLUMNS",
    "NLITriplet",
    "read_nli_triplets",
    "VIDEO_CAPTION_FIELDS",
    "VideoCaption",
    "read_video_captions",
]

_LAZY = {name: f"vlr_plugins.data.{module}" for module, names in {
    "dataset": ("TextViewsDataset", "TextViewsItem", "concat_owned", "draw_item", "owner_index"),
    "hard_negative_batches": ("HardNegativeBatchSampler", "batches_per_replica", "negative_indices"),
    "embedding_store": ("EmbeddingStore", "EmbeddingStoreWriter", "check_store_target"),
    "resumable_store": ("ResumableEmbeddingStoreWriter", "StoreProgress", "check_resumable_target",
                        "read_store_progress", "work_dir_of"),
    "media": ("ImageFiles", "MediaSource", "StoredEmbeddings"),
    "mvc_samples": ("MVC_DETAILED_FIELDS", "MVC_SAMPLE_SUFFIXES", "MVC_SUMMARY_FIELDS", "MVC_TEXT_FIELDS",
                    "MVCSample", "mvc_sample_from_record", "read_mvc_samples", "write_mvc_samples"),
    "nli": ("NLI_COLUMNS", "NLITriplet", "read_nli_triplets"),
    "video_captions": ("VIDEO_CAPTION_FIELDS", "VideoCaption", "read_video_captions"),
    "retrieval_set": ("RetrievalSet", "read_retrieval_jsonl"),
    "sample": ("SAMPLE_SUFFIXES", "TEXT_FIELDS", "ParagraphSample", "read_paragraph_samples",
               "sample_from_record", "write_paragraph_samples"),
    "schemas": ("SAMPLE_SCHEMAS", "text_fields"),
    "text_views": ("DrawnText", "TextView", "TextViews", "check_samples_have_views", "draw_texts"),
    "video_media": ("VideoClips",),
    "video": ("CLIP_MEAN", "CLIP_SAMPLERS", "CLIP_STD", "FRAME_STRATEGIES", "IMAGENET_MEAN", "IMAGENET_STD",
              "VIDEO_BACKENDS", "VideoBackendWarning", "VideoDecodeError", "VideoInfo", "frame_indices",
              "normalization_of", "read_frames", "sample_frames", "video_info", "video_transform",
              "window_frames"),
}.items() for name in names}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
