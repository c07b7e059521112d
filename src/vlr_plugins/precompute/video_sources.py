"""The videos to encode: a folder, a list (with clips of longer videos), or every video of
the benchmarks in a ``vlr eval`` benchmarks file, each with its id.

A video's id is its path relative to the ``--videos`` folder without the extension,
'/'-separated (``clips/2021/cat.mp4`` -> ``2021/cat``), as for images; a ``.txt`` list gives
the path as written without the extension; a ``.jsonl`` list gives ``{"id", "path",
"start"?, "end"?}``, ``start`` / ``end`` in seconds for an item that is a clip of a longer
video. ``--benchmarks`` takes the ids the benchmarks' readers give, so that ``vlr eval``
finds them in the store.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from vlr_plugins.data._text_files import utf8_lines
from vlr_plugins.errors import DataFormatError, MissingFileError
from vlr_plugins.precompute.images import _list_entry, _path_id

__all__ = ["VIDEO_SUFFIXES", "VideoItem", "benchmark_videos", "list_videos"]

#: File suffixes (lower-case) that :func:`list_videos` picks up from a folder: those of the
#: video benchmarks (MSR-VTT .mp4, MSVD and LSMDC .avi, DiDeMo's Flickr files .mp4 .m4v .mov
#: .avi .mpg .wmv .3gp ..., ActivityNet .mp4 .mkv .webm) and the other common containers.
VIDEO_SUFFIXES = (".mp4", ".avi", ".mkv", ".webm", ".mov", ".m4v", ".mpg", ".mpeg", ".flv", ".wmv", ".3gp")
_SHOWN = 5  # missing files named in a message


class VideoItem(NamedTuple):
    """One video to encode: its id, its file, and for a clip of a longer video the seconds
    ``start`` / ``end`` it spans (``None``: the video's start / end)."""

    id: str
    path: Path
    start: float | None = None
    end: float | None = None

    @property
    def window(self) -> tuple[float | None, float | None] | None:
        """``(start, end)`` for :func:`~vlr_plugins.data.video.sample_frames`, or ``None``."""
        return None if self.start is None and self.end is None else (self.start, self.end)


def _videos_in_folder(folder: Path) -> list[VideoItem]:
    found: dict[str, Path] = {}
    for path in folder.rglob("*"):
        rel = path.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts):  # .git, macOS "._x.mp4" forks
            continue
        if path.suffix.lower() not in VIDEO_SUFFIXES or not path.is_file():
            continue
        video_id = _path_id(rel.as_posix())
        if video_id in found:
            raise DataFormatError(folder, f"{found[video_id]} and {path} both give video id {video_id!r}")
        found[video_id] = path
    return [VideoItem(i, p) for i, p in sorted(found.items())]


def _seconds(raw: dict[str, Any], key: str, bad: Any) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise bad(key, f"expected seconds, a number >= 0, found {json.dumps(value)}")
    return float(value)


def _list_record(list_file: Path, line_no: int, line: str) -> tuple[str, str, float | None, float | None]:
    def bad(field: str | None, problem: str) -> DataFormatError:
        return DataFormatError(list_file, problem, record=line_no, field=field)

    video_id, path, raw = _list_entry(list_file, line_no, line)
    start, end = _seconds(raw, "start", bad), _seconds(raw, "end", bad)
    if start is not None and end is not None and not end > start:
        raise bad("end", f"expected the end after the start ({start:g} s), found {end:g} s")
    return video_id, path, start, end


def _videos_in_list(list_file: Path) -> list[VideoItem]:
    items: list[VideoItem] = []
    first_seen: dict[str, int] = {}
    jsonl = list_file.suffix.lower() == ".jsonl"
    for line_no, line in utf8_lines(list_file):
        if not line.strip():
            continue
        if jsonl:
            video_id, written, start, end = _list_record(list_file, line_no, line)
        else:
            written, start, end = line.strip(), None, None
            video_id = _path_id(written)
        if video_id in first_seen:
            raise DataFormatError(list_file, f"duplicate video id {video_id!r}, first seen on line "
                                             f"{first_seen[video_id]}", record=line_no, field="id" if jsonl else None)
        first_seen[video_id] = line_no
        path = Path(written)
        items.append(VideoItem(video_id, path if path.is_absolute() else list_file.parent / path, start, end))
    return items


def _some_exist(items: Sequence[VideoItem], where: str) -> None:
    """A list none of whose files exist names the wrong folder: refuse it before any work.
    Some missing files are failures of the run, reported with the undecodable ones."""
    if items and not any(item.path.exists() for item in items):
        shown = ", ".join(str(item.path) for item in items[:_SHOWN])
        more = f", ... and {len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
        raise MissingFileError(f"none of the {len(items)} videos {where} exist: {shown}{more}")


def list_videos(source: str | os.PathLike[str]) -> list[VideoItem]:
    """The videos to encode, as :class:`VideoItem` (id, path, start, end).

    ``source`` is one of

    - a folder: every file below it ending in one of :data:`VIDEO_SUFFIXES` (any case;
      hidden files and folders skipped), id = path relative to the folder without the
      extension, '/'-separated (``2021/cat.mp4`` -> ``2021/cat``); sorted by id;
    - a ``.txt`` list: one path per line, id = the path as written without the extension;
    - a ``.jsonl`` list: objects with ``id`` (string or integer) and ``path``, and for a clip
      of a longer video ``start`` and/or ``end`` in seconds (one file may give many clips).

    List files keep their order; relative paths in them are taken from the list file's
    folder. Ids must be unique (a :class:`DataFormatError` names both places). A source that
    is not there, or a list none of whose files exist, is a
    :class:`~vlr_plugins.errors.MissingFileError`; a listed file that is missing while others
    exist is reported by the run as a failure, like a file that cannot be decoded.
    """
    source = Path(source)
    if source.is_dir():
        found = _videos_in_folder(source)
        if not found:
            raise DataFormatError(source, f"no videos in this folder or below it (video files end in "
                                          f"{' '.join(VIDEO_SUFFIXES)}, any case; hidden files and folders "
                                          "are skipped)")
        return found
    if not source.is_file():
        raise MissingFileError(f"no video folder or list at {source}")
    if source.suffix.lower() not in (".txt", ".jsonl"):
        raise DataFormatError(source, f"cannot list videos from it: expected a folder, a .txt or a .jsonl list, "
                                      f"found suffix {source.suffix or '(none)'!r}")
    items = _videos_in_list(source)
    if not items:
        raise DataFormatError(source, "lists no videos")
    _some_exist(items, f"listed in {source}")
    return items


def benchmark_videos(path: str | os.PathLike[str]) -> list[VideoItem]:
    """Every video of the benchmarks in a ``vlr eval`` benchmarks file, with the item ids their
    readers give (so ``vlr eval`` finds them in the store), each id once.

    Each benchmark is read as ``vlr eval`` reads it
    (:func:`~vlr_plugins.eval.benchmarks.read_benchmark`: the reader, its ``args`` such as
    ``media_root``, its ``text_kinds``); benchmarks that list no media files are skipped.
    Its ``item_embeddings`` store need not exist yet. Two benchmarks may share items (the same
    id and file); the same id for two different files is a :class:`DataFormatError`.
    Problems in the file are reported as ``vlr eval`` reports them.
    """
    from vlr_plugins.eval.benchmarks import load_benchmark_specs, read_benchmark

    path = os.fspath(path)
    items: dict[str, VideoItem] = {}
    origin: dict[str, str] = {}
    for spec in load_benchmark_specs(path, require_stores=False):
        for retrieval_set in read_benchmark(spec):
            if retrieval_set.media is None:
                break
            for item_id, media in zip(retrieval_set.item_ids, retrieval_set.media_paths()):
                video = Path(os.path.normpath(media))
                if item_id not in items:
                    items[item_id], origin[item_id] = VideoItem(item_id, video), spec.name
                elif items[item_id].path != video:
                    raise DataFormatError(path, f"benchmarks {origin[item_id]!r} and {spec.name!r} give item "
                                                f"{item_id!r} two files, {items[item_id].path} and {video}; "
                                                "one store holds one row per id")
    if not items:
        raise DataFormatError(path, "none of its benchmarks lists media files (videos) to encode")
    found = list(items.values())
    _some_exist(found, f"of the benchmarks in {path}")
    return found
