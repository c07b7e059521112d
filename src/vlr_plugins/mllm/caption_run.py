"""Caption a list of videos into a resumable captions file: what ``vlr caption`` runs.

:func:`caption_videos` takes ``(id, path)`` pairs, skips the ids the
:class:`~vlr_plugins.mllm.captions_file.CaptionsFile` already holds, decodes and captions
the rest in batches, and appends each caption as soon as it and every video before it are
done (fsynced), in the list's order. Batches of more than one video are grouped by length:
a window of :data:`SORT_WINDOW` batches is decoded, sorted by prompt length (the captioner's
``token_counts``) and cut into batches of similar length, so little of a batch is padding;
a run killed at any point loses at most the window in flight. A video that cannot be
decoded is listed in ``<file>.failures.jsonl`` with the decoder's reason and left out;
a rerun with ``resume`` tries it again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from vlr_plugins.errors import DataFormatError
from vlr_plugins.mllm.captions_file import CaptionsFile, failures_path_of
from vlr_plugins.mllm.length_batches import length_batches

__all__ = ["SORT_WINDOW", "VIDEO_SUFFIXES", "CaptionRun", "caption_videos", "videos_in_folder"]

#: the suffixes :func:`videos_in_folder` takes as videos
VIDEO_SUFFIXES = (".mp4", ".mkv", ".webm", ".avi", ".mov", ".m4v")
#: how many batches of videos :func:`caption_videos` decodes at once to group them by length
SORT_WINDOW = 4


@dataclass
class CaptionRun:
    """What a run did: ``captioned`` now, ``skipped`` (already in the file), and ``failed``
    ``(id, reason)`` pairs (videos that could not be decoded)."""

    captioned: int = 0
    skipped: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)


def videos_in_folder(folder: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """``(id, path)`` of every video file directly in ``folder`` (id: the file name without
    its suffix), sorted; two files with one id are refused."""
    folder = os.fspath(folder)
    out: dict[str, str] = {}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        stem, suffix = os.path.splitext(name)
        if suffix.lower() not in VIDEO_SUFFIXES or not os.path.isfile(path):
            continue
        if stem in out:
            raise DataFormatError(folder, f"two videos have the id {stem!r}: {os.path.basename(out[stem])} and {name}")
        out[stem] = path
    if not out:
        raise DataFormatError(folder, f"no video files ({', '.join(VIDEO_SUFFIXES)}) in the folder")
    return list(out.items())


def caption_videos(captioner: Any, videos: Sequence[tuple[str, str]], out: CaptionsFile, *, batch_size: int = 1,
                   progress: bool = True) -> CaptionRun:
    """Caption every video of ``videos`` not yet in ``out``, ``batch_size`` at a time.

    ``captioner`` has ``frames(path) -> clip`` and ``caption_clips(clips) -> captions``
    (:class:`~vlr_plugins.mllm.captioner.VideoCaptioner`), and optionally
    ``token_counts(clips) -> lengths``: then batches are grouped by length within windows of
    :data:`SORT_WINDOW` batches (the module docstring). Returns a :class:`CaptionRun`;
    the failures file is rewritten with this run's failures (removed when there are none).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, found {batch_size!r}")
    seen: dict[str, int] = {}
    for i, (vid, _) in enumerate(videos):
        if vid in seen:
            raise ValueError(f"video id {vid!r} is listed twice (entries {seen[vid]} and {i})")
        seen[vid] = i
    todo = [(vid, path) for vid, path in videos if vid not in out.done]
    run = CaptionRun(skipped=len(videos) - len(todo))
    from tqdm.auto import tqdm

    bar = tqdm(total=len(todo), desc="caption videos", unit="video", disable=not progress)
    token_counts = getattr(captioner, "token_counts", None) if batch_size > 1 else None
    window = batch_size * (SORT_WINDOW if token_counts is not None else 1)
    try:
        for start in range(0, len(todo), window):
            ids, clips = [], []
            for vid, path in todo[start:start + window]:
                try:
                    clips.append(captioner.frames(path))
                    ids.append(vid)
                except DataFormatError as e:
                    run.failed.append((vid, str(e)))
                    bar.update(1)
            if token_counts is not None and len(clips) > 1:
                batches = length_batches(token_counts(clips), batch_size=batch_size)
            else:
                batches = [list(range(i, min(i + batch_size, len(clips)))) for i in range(0, len(clips), batch_size)]
            done: dict[int, str] = {}
            written = 0
            for batch in batches:
                done.update(zip(batch, captioner.caption_clips([clips[i] for i in batch])))
                while written in done:  # in the list's order, as soon as all before are done
                    out.append(ids[written], done.pop(written))
                    written += 1
                    run.captioned += 1
                    bar.update(1)
    finally:
        bar.close()
    _write_failures(out, run.failed)
    return run


def _write_failures(out: CaptionsFile, failed: list[tuple[str, str]]) -> None:
    path = failures_path_of(out.path)
    if not failed:
        if path.exists():
            path.unlink()
        return
    from vlr_plugins._io import atomic_write_text

    atomic_write_text(path, "".join(json.dumps({"id": vid, "error": why}, ensure_ascii=False) + "\n"
                                    for vid, why in failed))
