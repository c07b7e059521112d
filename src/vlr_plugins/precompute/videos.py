"""Precompute frozen video embeddings into an EmbeddingStore, resumably.

``vlr precompute --videos SRC --encoder SPEC --out STORE``: the videos
(:mod:`~vlr_plugins.precompute.video_sources`) are decoded in DataLoader workers, ``frames``
frames each, picked by ``sampler`` (:func:`~vlr_plugins.data.video.frame_indices`), resized
and centre-cropped to the tower's ``image_size`` and normalised with its ``image_mean`` /
``image_std``; the tower (:mod:`~vlr_plugins.precompute.video_encoders`) encodes them in batches
and a :class:`~vlr_plugins.data.ResumableEmbeddingStoreWriter` keeps every finished part,
so a killed run is finished by a rerun with ``resume=True``. The store's ``meta`` records
how the rows were made. A video that cannot be decoded is listed, with the decoder's
reason, in a failures file beside the store (``STORE.failures.jsonl``) and the run goes on.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from vlr_plugins.data.embedding_store import EmbeddingStore
from vlr_plugins.data.resumable_store import ResumableEmbeddingStoreWriter, _named, check_resumable_target
from vlr_plugins.data.video import CLIP_SAMPLERS, VIDEO_BACKENDS, VideoDecodeError, sample_frames, video_transform
from vlr_plugins.errors import DataFormatError, VideoEncoderError, _type_name
from vlr_plugins.precompute.video_encoders import _tower_device, _tower_dim, tower_geometry
from vlr_plugins.precompute.video_sources import VideoItem

__all__ = ["VIDEO_SAMPLERS", "failures_path_of", "precompute_video_embeddings", "video_store_meta"]

#: The frame samplers a store can be written with: they give every video the same number
#: of frames (``fps`` does not, so it is not one of them).
VIDEO_SAMPLERS = CLIP_SAMPLERS


def video_store_meta(tower: Any, encoder: str, *, frames: int, sampler: str, seed: int, backend: str) -> dict[str, Any]:
    """The ``meta`` of a video store: how every row was made, so that a resumed run can be
    checked against it and ``vlr eval`` against a benchmark's protocol.

    ``{"encoder": encoder, "media": "video", "frames", "sampler", "seed"`` (``rand`` only,
    else ``None``)``, "backend", "transform": {"size", "resize": "center_crop", "mean", "std"}}``.
    """
    size, mean, std = tower_geometry(tower, f"video tower {encoder!r}")
    return {"encoder": encoder, "media": "video", "frames": frames, "sampler": sampler,
            "seed": seed if sampler == "rand" else None, "backend": backend,
            "transform": {"size": size, "resize": "center_crop", "mean": list(mean), "std": list(std)}}


def failures_path_of(out_dir: str | os.PathLike[str]) -> Path:
    """Where :func:`precompute_video_embeddings` lists the videos it could not decode:
    ``STORE.failures.jsonl`` beside the store (``stores/msrvtt`` -> ``stores/msrvtt.failures.jsonl``)."""
    out = _named(out_dir)
    return out.with_name(f"{out.name}.failures.jsonl")


def _video_seed(seed: int, video_id: str) -> int:
    """Each video's own seed for ``rand``: the same for a video whatever the order, the batch or
    the worker it comes in, different between videos."""
    digest = hashlib.sha256(f"{seed}\0{video_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class _Clips(torch.utils.data.Dataset):
    """Item i: ``(i, frames (T, 3, S, S), None)``, or ``(i, None, failure record)`` for a video
    that cannot be decoded; runs in the DataLoader's workers."""

    def __init__(self, items: Sequence[VideoItem], frames: int, sampler: str, seed: int, backend: str,
                 transform: Any) -> None:
        self.items, self.frames, self.sampler = list(items), frames, sampler
        self.seed, self.backend, self.transform = seed, backend, transform

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor | None, dict[str, Any] | None]:
        item = self.items[index]
        seed = _video_seed(self.seed, item.id) if self.sampler == "rand" else None
        try:
            raw = sample_frames(item.path, self.frames, self.sampler, seed=seed, window=item.window,
                                backend=self.backend)
        except VideoDecodeError as e:
            return index, None, {"id": item.id, "path": str(item.path), "backend": e.backend, "reason": e.reason,
                                 "error": str(e)}
        except ValueError as e:  # a clip's window that the video does not reach
            return index, None, {"id": item.id, "path": str(item.path), "backend": self.backend, "reason": str(e),
                                 "error": f"{item.path}: {e}"}
        return index, self.transform(raw), None


def _as_list(batch: Any) -> Any:
    return batch


def _in_batches(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """``items`` in consecutive lists of ``size`` (the last one shorter)."""
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _checked_embeddings(out: Any, ids: Sequence[str], dim: int | None, name: str) -> torch.Tensor:
    n = len(ids)
    try:
        emb = torch.as_tensor(out)
    except (TypeError, ValueError, RuntimeError) as e:
        raise VideoEncoderError(f"video tower {name} returned a {_type_name(out)}, expected an ({n}, D) tensor "
                                f"({e})") from None
    if emb.ndim != 2 or emb.shape[0] != n or (dim is not None and emb.shape[1] != dim):
        raise VideoEncoderError(f"video tower {name} returned shape {tuple(emb.shape)} for {n} videos, expected "
                                f"({n}, {dim if dim is not None else 'D'})")
    emb = emb.detach().float().cpu()
    finite = torch.isfinite(emb).all(dim=1)
    if not bool(finite.all()):
        raise VideoEncoderError(f"video tower {name} gave video {ids[int((~finite).nonzero()[0])]!r} an embedding "
                                "that is not finite (NaN or inf)")
    return emb


def _write_failures(path: Path, failures: list[dict[str, Any]]) -> None:
    from vlr_plugins._io import atomic_write_text

    atomic_write_text(path, "".join(json.dumps(f, ensure_ascii=False) + "\n" for f in failures))


def precompute_video_embeddings(
    encoder: Any,
    videos: Sequence[VideoItem | tuple[str, str | os.PathLike[str]]],
    out_dir: str | os.PathLike[str],
    *,
    frames: int = 16,
    sampler: str = "middle",
    seed: int = 0,
    backend: str = "pyav",
    batch_size: int = 16,
    num_workers: int = 4,
    dtype: torch.dtype = torch.float32,
    resume: bool = False,
    overwrite: bool = False,
    failures: str | os.PathLike[str] | None = None,
    meta: dict[str, Any] | None = None,
    progress: bool = True,
    flush_rows: int = 256,
    flush_seconds: float = 30.0,
) -> tuple[EmbeddingStore, int]:
    """Encode ``videos`` once with a video tower and write their embeddings to an
    :class:`EmbeddingStore`; returns the store and the number of videos that failed.

    DataLoader workers decode ``frames`` frames of each video (``sampler``, see
    :func:`~vlr_plugins.data.video.frame_indices`; ``rand`` draws each video's frames from its
    own seed, made from ``seed`` and its id) and transform them for evaluation
    (:func:`~vlr_plugins.data.video.video_transform` at the tower's ``image_size``, ``image_mean``
    and ``image_std``); the calling process batches them through ``encoder.encode_video``
    (frames (B, T, 3, S, S) -> (B, D)) under ``torch.inference_mode()``, on the device of the
    tower's parameters.

    The store is written by a :class:`~vlr_plugins.data.ResumableEmbeddingStoreWriter`: rows
    become durable every ``flush_rows`` rows or ``flush_seconds`` seconds, and with
    ``resume=True`` the ids already there (a killed run's, or a finished store's) are skipped,
    so a rerun finishes the store. ``overwrite=True`` starts over. Earlier rows written with
    other settings (``meta``: encoder, frames, sampler, seed, backend, transform) are refused
    by name (:func:`~vlr_plugins.data.check_resumable_target`).

    A video that cannot be decoded (missing, empty, truncated, not a video) is skipped and
    listed, one JSON object per line ``{"id", "path", "backend", "reason", "error"}``, in
    ``failures`` (default :func:`failures_path_of` ``out_dir``), written atomically at the
    end and when the run is interrupted; a finished run without failures removes an earlier
    failures file. When no video at all could be encoded, nothing is written but the
    failures file, and a :class:`DataFormatError` naming it is raised.

    Args:
        encoder: a :class:`~vlr_plugins.vision.VideoTower`, e.g. from
            :func:`~vlr_plugins.specs.load_video_encoder`.
        videos: :class:`~vlr_plugins.precompute.VideoItem` (or ``(id, path)`` pairs), e.g. from
            :func:`~vlr_plugins.precompute.list_videos`.
        out_dir: the store to write.
        frames, sampler, seed, backend: how frames are picked and decoded (:data:`VIDEO_SAMPLERS`,
            :data:`~vlr_plugins.data.video.VIDEO_BACKENDS`).
        batch_size: videos per ``encode_video`` call.
        num_workers: DataLoader worker processes decoding videos (0: in this process).
        dtype: storage dtype of the store (float32 or float16).
        meta: entries added to (or replacing) :func:`video_store_meta`'s; ``encoder`` names the
            encoder (default: its class).
        progress: show a tqdm bar.

    Example::

        >>> tower = load_video_encoder("open_clip:ViT-B-16:openai", device="cuda")  # doctest: +SKIP
        >>> store, failed = precompute_video_embeddings(tower, list_videos("msrvtt/videos"),  # doctest: +SKIP
        ...                                             "stores/msrvtt", frames=12, resume=True)
    """
    from tqdm.auto import tqdm

    items = [v if isinstance(v, VideoItem) else VideoItem(v[0], Path(v[1])) for v in videos]
    if not items:
        raise ValueError("no videos to encode")
    first: dict[str, Path] = {}
    for item in items:
        if not isinstance(item.id, str):
            raise TypeError(f"video ids must be strings, found {_type_name(item.id)} for {item.path}")
        if item.id in first:
            raise ValueError(f"duplicate video id {item.id!r}: {first[item.id]} and {item.path}")
        first[item.id] = item.path
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
        raise ValueError(f"frames must be a positive integer, found {frames!r}")
    if sampler not in VIDEO_SAMPLERS:
        raise ValueError(f"sampler must be one of {VIDEO_SAMPLERS}, found {sampler!r}")
    if backend not in VIDEO_BACKENDS:
        raise ValueError(f"backend must be one of {VIDEO_BACKENDS}, found {backend!r}")
    if batch_size < 1 or num_workers < 0:
        raise ValueError(f"batch_size must be positive and num_workers >= 0, found {batch_size}, {num_workers}")

    name = f"{type(encoder).__module__}:{type(encoder).__qualname__}"
    store_meta = {**video_store_meta(encoder, name, frames=frames, sampler=sampler, seed=seed, backend=backend),
                  **(meta or {})}
    name = str(store_meta["encoder"])
    size, mean, std = tower_geometry(encoder, f"video tower {name!r}")
    dim = _tower_dim(encoder)
    earlier = check_resumable_target(out_dir, resume=resume, overwrite=overwrite, dim=dim, dtype=dtype,
                                     meta=store_meta)
    done = set(earlier.ids) if earlier is not None else set()
    todo = [item for item in items if item.id not in done]
    failures_path = Path(failures) if failures is not None else failures_path_of(out_dir)
    if earlier is not None and not todo and earlier.finished:
        failures_path.unlink(missing_ok=True)
        return EmbeddingStore(out_dir), 0  # nothing to add

    def writer_for(width: int) -> ResumableEmbeddingStoreWriter:
        return ResumableEmbeddingStoreWriter(out_dir, width, dtype=dtype, meta=store_meta, overwrite=overwrite,
                                             resume=resume, flush_rows=flush_rows, flush_seconds=flush_seconds)

    transform = video_transform(False, size, mean, std)
    # the workers decode clips one at a time and this process cuts them into batches: the first
    # batch is ready once batch_size clips are decoded by all the workers together (a worker per
    # batch kept the tower waiting for one worker to decode a whole batch), and about two batches
    # are decoded ahead of the tower (at most, the same order and batches as without workers)
    loader = torch.utils.data.DataLoader(_Clips(todo, frames, sampler, seed, backend, transform), batch_size=None,
                                         num_workers=num_workers, collate_fn=_as_list,
                                         prefetch_factor=-(-2 * batch_size // num_workers) if num_workers else None)
    device = _tower_device(encoder)
    writer: ResumableEmbeddingStoreWriter | None = None
    failed: list[dict[str, Any]] = []
    try:
        bar = tqdm(total=len(items), initial=len(items) - len(todo), unit="video", desc="encoding videos",
                   disable=not progress)
        with bar:
            for batch in _in_batches(loader, batch_size):
                failed.extend(failure for _, _, failure in batch if failure is not None)
                good = [(index, clip) for index, clip, failure in batch if failure is None]
                if good:
                    ids = [todo[index].id for index, _ in good]
                    clips = torch.stack([clip for _, clip in good]).to(device)
                    with torch.inference_mode():
                        out = encoder.encode_video(clips)
                    emb = _checked_embeddings(out, ids, writer.dim if writer is not None else dim, name)
                    if writer is None:
                        writer = writer_for(int(emb.shape[1]))
                    writer.add(ids, emb)
                bar.update(len(batch))
                if failed:
                    bar.set_postfix(failed=len(failed))
        if writer is None and earlier is not None and not earlier.finished:
            writer = writer_for(earlier.dim)  # every new video failed: finish the store with the rows there
        if writer is not None:
            writer.close()
    except BaseException:
        if writer is not None:
            writer.interrupt()  # keep the rows computed so far for a resumed run
        if failed:
            _write_failures(failures_path, failed)
        raise
    if failed:
        _write_failures(failures_path, failed)
    else:
        failures_path.unlink(missing_ok=True)
    if writer is None and earlier is None:
        raise DataFormatError(failures_path, f"lists all {len(failed)} videos: none could be decoded (each line "
                                             "gives the decoder's reason); no store was written")
    return EmbeddingStore(out_dir), len(failed)
