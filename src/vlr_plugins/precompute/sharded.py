"""``vlr precompute --shard-index I --shard-count N`` (a SLURM array) and ``torchrun``: each
process encodes a contiguous share of the items into its own part, resumably; the last to
finish merges the parts into ``--out`` (data/store_parts.py; docs/precompute.md).

Shard ``I`` takes the items :func:`~vlr_plugins._shards.shard_range` gives with
``align=--batch-size``: its batches are the very batches one process makes of the same input,
so the merged store is byte for byte the single-process one. ``--merge-only`` merges the
parts of finished shards when none of them could (their job was killed after the part).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from vlr_plugins._shards import merge_count, shard_range
from vlr_plugins.data.embedding_store import _is_store
from vlr_plugins.data.resumable_store import ResumableEmbeddingStoreWriter, read_store_progress, work_dir_of
from vlr_plugins.data.store_parts import SHARD_KEY, Parts, inputs_digest, parts_dir_of
from vlr_plugins.errors import UsageError, failed_items_status

__all__ = ["IMAGE_LAYOUT", "SETTING_OPTIONS", "VIDEO_LAYOUT", "ShardJob", "merge_only", "run_image_shard", "run_video_shard"]

#: the setting a part records -> the option that sets it (named when parts disagree)
SETTING_OPTIONS = {
    "dim": "--encoder", "dtype": "--dtype", "encoder": "--encoder", "model_dtype": "--model-dtype",
    "media": "--images / --videos", "frames": "--frames", "sampler": "--sampler", "seed": "--seed",
    "backend": "--backend", "transform": "--encoder", "shard.count": "--shard-count",
    "shard.batch_size": "--batch-size", "shard.items": "--images / --videos / --benchmarks",
    "shard.inputs": "--images / --videos / --benchmarks", "shard.layout": "--images / --videos",
}
_FLUSH_ROWS, _FLUSH_SECONDS = 256, 30.0
IMAGE_LAYOUT = {"writer": "store", "shard_size": 100_000}  # precompute_image_embeddings' EmbeddingStoreWriter
VIDEO_LAYOUT = {"writer": "resumable", "flush_rows": _FLUSH_ROWS}  # precompute_video_embeddings' writer


def _aligned(items: int, index: int, count: int, shard: dict[str, Any]) -> tuple[int, int]:
    return shard_range(int(items), index, count, align=int(shard.get("batch_size", 1)))


class ShardJob:
    """Shard ``index`` of ``count`` of the items ``ids`` for the store ``out``."""

    def __init__(self, out: str | os.PathLike[str], ids: Sequence[str], index: int, count: int, batch_size: int,
                 layout: dict[str, Any], what: str, options: dict[str, str] | None = None) -> None:
        self.out, self.index, self.count, self.what = Path(out), index, count, what
        self.parts = Parts(self.out, count, SETTING_OPTIONS if options is None else options)
        self.start, self.stop = shard_range(len(ids), index, count, align=batch_size)
        self.info = {"index": index, "count": count, "start": self.start, "stop": self.stop, "items": len(ids),
                     "inputs": inputs_digest(ids), "batch_size": batch_size, "layout": layout}
        self.part = self.parts.part(index)
        self.ids = list(ids)

    def describe(self) -> str:
        span = (f"{self.what} {self.start}..{self.stop - 1} of {len(self.ids)}: {self.ids[self.start]!r} .. "
                f"{self.ids[self.stop - 1]!r}" if self.stop > self.start else f"no {self.what}")
        return f"shard {self.index} of {self.count} ({span})"

    def meta(self, meta: dict[str, Any]) -> dict[str, Any]:
        return {**meta, SHARD_KEY: self.info}

    def check(self, *, dim: int | None, dtype: torch.dtype, meta: dict[str, Any], resume: bool,
              overwrite: bool) -> bool:
        """Refuse before any work what this shard may not write; True when its part is finished already."""
        out = self.out
        if _is_store(out) and not parts_dir_of(out).exists() and not overwrite:
            raise UsageError("--out", f"{out} is a finished store (merged already, or a single-process run's); "
                                      "pass --overwrite to write it again from shards, or give another --out")
        if work_dir_of(out).exists() and not overwrite:
            raise UsageError("--out", f"{work_dir_of(out)} holds an unfinished single-process run of {out}; finish it "
                                      "with --resume (without shards), or pass --overwrite to start over in shards")
        if not overwrite:
            self.parts.check_against(self.index, {"dim": dim, "dtype": str(dtype).removeprefix("torch."),
                                                  "meta": self.meta(meta)})
        progress = read_store_progress(self.part) if not overwrite else None
        if progress is not None and not resume:
            raise UsageError("--resume", f"{self.describe()}: {self.part} already holds {len(progress.ids)} rows "
                                         "of this shard; pass --resume to finish it (or keep it), or --overwrite "
                                         "to start the shard over")
        return progress is not None and progress.finished and len(progress.ids) == self.stop - self.start

    def writer(self, dim: int, dtype: torch.dtype, meta: dict[str, Any], *, resume: bool,
               overwrite: bool) -> ResumableEmbeddingStoreWriter:
        self.parts.dir.mkdir(parents=True, exist_ok=True)
        return ResumableEmbeddingStoreWriter(self.part, dim, dtype=dtype, meta=self.meta(meta), overwrite=overwrite,
                                             resume=resume, flush_rows=_FLUSH_ROWS, flush_seconds=_FLUSH_SECONDS)

    def finish(self, *, force: bool = False) -> int:
        """This shard's part is written: merge when every part is, else say which are still to come."""
        missing = self.parts.missing(self.count)
        if missing:
            print(f"{self.describe()}: written to {self.part}; waiting for shard{'s' if len(missing) > 1 else ''} "
                  f"{', '.join(map(str, missing))} (the last shard to finish merges into {self.out}, or run "
                  "vlr precompute --merge-only --out with it)")
            return 0
        return _merge(self.parts, self.count, who=self.describe(), force=force)


def _merge(parts: Parts, count: int, *, who: str, force: bool) -> int:
    from vlr_plugins._merge_claim import DEFAULT_CLAIM_TIMEOUT, take_claim

    parts.merge(count, align_check=_aligned, check_only=True)  # what is refused is refused before the claim
    taken, held = take_claim(parts.dir / "merging.json", timeout=DEFAULT_CLAIM_TIMEOUT, force=force)
    if not taken:
        if not parts.dir.exists():
            print(f"{who}: the parts were merged into {parts.out} by another shard")
            return 0
        print(f"{who}: another process merges the parts into {parts.out} ({held.describe() if held else 'gone'})")
        return 0
    try:
        result = parts.merge(count, align_check=_aligned)
    except BaseException:
        (parts.dir / "merging.json").unlink(missing_ok=True)  # ours: a refused merge leaves the parts as they were
        raise
    print(f"wrote {result.rows} embeddings to {result.out} (merged from {count} shards)")
    if result.failures:
        print(f"error: {result.failures} items could not be decoded; they are listed with the decoder's reason in "
              f"{result.out.name}.failures.jsonl beside the store (the store holds every other item)",
              file=sys.stderr)
    return failed_items_status(result.failures, result.rows + result.failures)


def merge_only(out: str | os.PathLike[str], count: int | None, options: dict[str, str] | None = None) -> int:
    """``--merge-only``: merge the parts of every shard, refusing a missing or mismatched one
    (``options``: the option that sets each setting, for the messages; default precompute's)."""
    parts = Parts(Path(out), count, SETTING_OPTIONS if options is None else options)
    count = merge_count(parts.counts_found(), count, parts.dir, out)
    parts.count = count
    return _merge(parts, count, who="--merge-only", force=True)


def run_image_shard(job: ShardJob, encoder: Callable[[list[Any]], torch.Tensor], images: Sequence[tuple[str, Path]],
                    *, batch_size: int, dtype: torch.dtype, meta: dict[str, Any], resume: bool, overwrite: bool,
                    num_workers: int = 4) -> int:
    """Encode this shard's images into its part, in the single-process run's batches (a resumed
    run encodes again the whole batch a kill interrupted, and keeps only its missing rows)."""
    from vlr_plugins.precompute.images import _as_embeddings, _encoder_name, decoded_batches

    name = _encoder_name(encoder)
    dim = getattr(encoder, "dim", None)
    dim = dim if isinstance(dim, int) and not isinstance(dim, bool) else None
    store_meta = {"encoder": name, **meta}
    if job.check(dim=dim, dtype=dtype, meta=store_meta, resume=resume, overwrite=overwrite):
        print(f"{job.describe()}: its part {job.part} is finished already")
        return job.finish()
    mine = list(images[job.start : job.stop])
    progress = None if overwrite else read_store_progress(job.part)
    dim = dim or (progress.dim if progress is not None else None)
    if not mine and dim is None:
        raise UsageError("--shard-count", f"{job.describe()} gets no images ({len(images)} images in batches of "
                                          f"{batch_size}) and encoder {name} has no 'dim' to size an empty part; use "
                                          "fewer shards or a smaller --batch-size")
    writer = job.writer(dim, dtype, store_meta, resume=resume, overwrite=overwrite) if dim is not None else None
    pool = ThreadPoolExecutor(num_workers) if num_workers > 0 else None
    try:
        # a resumed shard skips the batches it wrote (a batch is opened one ahead of its encoding:
        # one found whole only after that is still encoded, and none of its rows added twice)
        todo = (batch for batch in (mine[start : start + batch_size] for start in range(0, len(mine), batch_size))
                if writer is None or not all(i in writer for i, _ in batch))
        for batch, pil in decoded_batches(todo, pool):
            emb = _as_embeddings(encoder(pil), [i for i, _ in batch], dim, name, dtype)
            if writer is None:
                dim = int(emb.shape[1])
                writer = job.writer(dim, dtype, store_meta, resume=resume, overwrite=overwrite)
            keep = [k for k, (i, _) in enumerate(batch) if i not in writer]
            writer.add([batch[k][0] for k in keep], torch.as_tensor(emb)[keep])
        writer.close()
    except BaseException:
        if writer is not None:
            writer.interrupt()  # the rows written so far stay for --resume
            print(f"{job.describe()} stopped; the rows written so far are kept in {work_dir_of(job.part)}: rerun "
                  "the same command with --resume to finish the shard", file=sys.stderr)
        raise
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return job.finish()


def run_video_shard(job: ShardJob, encoder: Any, videos: Sequence[Any], *, dim: int | None, dtype: torch.dtype,
                    meta: dict[str, Any], extra: dict[str, Any], resume: bool, overwrite: bool,
                    **options: Any) -> int:
    """Encode this shard's videos into its part with :func:`precompute_video_embeddings`: ``meta``
    is the store's whole meta (checked against the other parts), ``extra`` what the command adds
    to :func:`~vlr_plugins.precompute.videos.video_store_meta`'s (encoder spec, model dtype)."""
    from vlr_plugins.precompute.videos import precompute_video_embeddings

    if job.check(dim=dim, dtype=dtype, meta=meta, resume=resume, overwrite=overwrite):
        print(f"{job.describe()}: its part {job.part} is finished already")
        return job.finish()
    mine = list(videos[job.start : job.stop])
    failures = job.parts.failures(job.index)
    if not mine:
        if dim is None:
            raise UsageError("--shard-count", f"{job.describe()} gets no videos ({len(videos)} videos in batches of "
                                              f"{job.info['batch_size']}) and the tower has no embed_dim to size an "
                                              "empty part; use fewer shards or a smaller --batch-size")
        job.writer(dim, dtype, meta, resume=resume, overwrite=overwrite).close()
        return job.finish()
    job.parts.dir.mkdir(parents=True, exist_ok=True)
    try:
        _, failed = precompute_video_embeddings(
            encoder, mine, job.part, dtype=dtype, resume=resume, overwrite=overwrite, failures=failures,
            meta={**extra, SHARD_KEY: job.info}, flush_rows=_FLUSH_ROWS, flush_seconds=_FLUSH_SECONDS, **options)
    except KeyboardInterrupt:
        if work_dir_of(job.part).is_dir():
            print(f"{job.describe()} stopped; the embeddings written so far are kept in {work_dir_of(job.part)}: "
                  "rerun the same command with --resume to finish the shard", file=sys.stderr)
        raise
    if failed:  # the job is partial whoever merges it (the module's exit convention: 1)
        print(f"{job.describe()}: {failed} videos could not be decoded; they are listed in {failures}",
              file=sys.stderr)
    return max(1 if failed else 0, job.finish())

