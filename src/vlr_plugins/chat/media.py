"""Images and videos inside chat messages: one way to write them, each backend's way to send them.

A pipeline writes a message's media as a *media part*, a reference to a file rather than
its pixels, so that a request (and its cache key) stays small and the same whatever
serves it::

    {"type": "image", "image": "/data/cc3m/000123.jpg"}
    {"type": "video", "video": "/data/internvid/v42.mp4", "num_frames": 16, "strategy": "uniform"}

Each backend turns them into what its model takes:

* an OpenAI-compatible server (and vLLM's ``LLM.chat``): :func:`to_openai_messages`, an
  ``image_url`` part holding the file as a base64 ``data:`` URL; a video as its sampled
  frames, one ``image_url`` part each (``video_transport="frames"``, which every
  multi-image server takes), or as one ``video_url`` part naming the file
  (``"file_url"``: vLLM serves it with ``--allowed-local-media-path``);
* a transformers processor: :func:`template_messages` (``{"type": "image"}`` placeholders
  for the chat template) and :func:`media_of` (the files in order, decoded by the backend).

Frames are picked by :func:`vlr_plugins.data.video.sample_frames` (``strategy`` as there:
``uniform``, ``middle``, ``rand`` ...).
"""

from __future__ import annotations

import base64
import io
import mimetypes
import os
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["VIDEO_TRANSPORTS", "image_part", "video_part", "media_of", "template_messages",
           "to_openai_messages"]

VIDEO_TRANSPORTS = ("frames", "file_url")
_MEDIA_TYPES = ("image", "video")


def image_part(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The media part of an image file."""
    return {"type": "image", "image": os.fspath(path)}


def video_part(path: str | os.PathLike[str], num_frames: int = 16, strategy: str = "uniform") -> dict[str, Any]:
    """The media part of a video file, seen as ``num_frames`` frames picked by ``strategy``."""
    return {"type": "video", "video": os.fspath(path), "num_frames": int(num_frames), "strategy": strategy}


def _parts(content: Any) -> list[Any]:
    return [] if isinstance(content, str) or content is None else list(content)


def media_of(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every media part of ``messages``, in the order the model sees them."""
    return [dict(p) for m in messages for p in _parts(m.get("content"))
            if isinstance(p, Mapping) and p.get("type") in _MEDIA_TYPES]


def template_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` for a transformers chat template: each media part reduced to its
    placeholder (``{"type": "image"}``), text parts kept; a content of text parts only
    becomes one string (what text-only chat templates expect)."""
    out = []
    for m in messages:
        content = m.get("content")
        if not isinstance(content, str) and content is not None:
            content = [{"type": p["type"]} if p.get("type") in _MEDIA_TYPES else dict(p) for p in content]
            if all(p.get("type") == "text" for p in content):
                content = "".join(p.get("text", "") for p in content)
        out.append({**m, "content": content})
    return out


def _data_url(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _image_url(path: str) -> dict[str, Any]:
    mime = mimetypes.guess_type(path)[0]
    if mime is None or not mime.startswith("image/"):
        raise ValueError(f"{path}: not an image file name (expected .jpg, .png, .webp ...)")
    with open(path, "rb") as f:
        return {"type": "image_url", "image_url": {"url": _data_url(f.read(), mime)}}


def _frame_urls(part: Mapping[str, Any]) -> list[dict[str, Any]]:
    from PIL import Image

    from vlr_plugins.data.video.decode import sample_frames

    frames = sample_frames(part["video"], int(part.get("num_frames", 16)), part.get("strategy", "uniform"))
    out = []
    for frame in frames.numpy():
        buffer = io.BytesIO()
        Image.fromarray(frame).save(buffer, format="JPEG", quality=90)
        out.append({"type": "image_url", "image_url": {"url": _data_url(buffer.getvalue(), "image/jpeg")}})
    return out


def to_openai_messages(messages: Sequence[Mapping[str, Any]], *,
                       video_transport: str = "frames") -> list[dict[str, Any]]:
    """``messages`` as the OpenAI chat API takes them: media parts become ``image_url``
    parts (data URLs) or, for a video with ``video_transport="file_url"``, one
    ``video_url`` part (``file://`` + the absolute path). Messages without media are
    returned as they are (copied)."""
    if video_transport not in VIDEO_TRANSPORTS:
        raise ValueError(f"video_transport must be one of {VIDEO_TRANSPORTS}, found {video_transport!r}")
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str) or content is None:
            out.append(dict(m))
            continue
        parts: list[dict[str, Any]] = []
        for p in content:
            kind = p.get("type")
            if kind == "image":
                parts.append(_image_url(p["image"]))
            elif kind == "video" and video_transport == "file_url":
                url = "file://" + os.path.abspath(p["video"])
                parts.append({"type": "video_url", "video_url": {"url": url}})
            elif kind == "video":
                parts.extend(_frame_urls(p))
            else:
                parts.append(dict(p))
        out.append({**m, "content": parts})
    return out
