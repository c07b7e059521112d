"""Precompute: embed images and videos once with a frozen tower into an embedding store
(:mod:`vlr_plugins.data`'s stores), as ``vlr precompute`` does.

- :func:`precompute_image_embeddings` over :func:`list_images` (a folder or a list), with an
  image encoder (:class:`BlipImageEncoder`, an MLLM's image side, or your callable;
  :func:`vlr_plugins.specs.load_image_encoder` builds one from a spec);
- :func:`precompute_video_embeddings` over :func:`list_videos` / :func:`benchmark_videos`,
  resumable, with a video tower (:func:`vlr_plugins.specs.load_video_encoder`); videos that
  cannot be decoded are listed in :func:`failures_path_of`.

Importing this package needs only torch; each function imports what it reads with.
"""

from __future__ import annotations

from vlr_plugins._lazy import lazy_exports

__all__ = ["BlipImageEncoder", "list_images", "precompute_image_embeddings", "VIDEO_SAMPLERS", "failures_path_of",
           "precompute_video_embeddings", "video_store_meta", "VIDEO_SUFFIXES", "VideoItem", "benchmark_videos",
           "list_videos"]

_IMAGES, _VIDEOS, _SOURCES = ("vlr_plugins.precompute.images", "vlr_plugins.precompute.videos",
                              "vlr_plugins.precompute.video_sources")
_LAZY = {"BlipImageEncoder": _IMAGES, "list_images": _IMAGES, "precompute_image_embeddings": _IMAGES,
         "VIDEO_SAMPLERS": _VIDEOS, "failures_path_of": _VIDEOS, "precompute_video_embeddings": _VIDEOS,
         "video_store_meta": _VIDEOS, "VIDEO_SUFFIXES": _SOURCES, "VideoItem": _SOURCES,
         "benchmark_videos": _SOURCES, "list_videos": _SOURCES}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
