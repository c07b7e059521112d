"""``vlr caption --shard-index I --shard-count N`` (a SLURM array) and ``torchrun``: each process
captions a contiguous share of the videos into its own part (mllm/captions_parts.py),
resumably; the last to finish merges the parts into ``--out`` (docs/capst.md, "Sharded
captioning"); ``--merge-only`` merges the parts of finished shards when none of them could.

Shard ``I`` takes the videos :func:`~vlr_plugins._shards.shard_range` gives with ``align``
one sorting window (:data:`~vlr_plugins.mllm.caption_run.SORT_WINDOW` x ``--batch-size``):
its windows, so its length-sorted batches, are the very ones one process makes of the same
list, so (greedy decoding, the same threads per process) its captions are the single-process
ones.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vlr_plugins._shards import merge_count, shard_range
from vlr_plugins.errors import UsageError, failed_items_status
from vlr_plugins.mllm.captions_file import failures_path_of
from vlr_plugins.mllm.captions_parts import SHARD_KEY, CaptionParts, caption_inputs_digest, parts_dir_of

__all__ = ["CaptionShardJob", "merge_only", "parts_dir_of"]


class CaptionShardJob:
    """Shard ``index`` of ``count`` of ``videos`` (``(id, path)`` pairs) for the captions file ``out``."""

    def __init__(self, out: str | os.PathLike[str], videos: Sequence[tuple[str, str]], index: int, count: int,
                 batch_size: int) -> None:
        self.out, self.index, self.count = Path(out), index, count
        self.parts = CaptionParts(self.out, count)
        self.part = self.parts.part(index)
        self.videos = list(videos)
        from vlr_plugins.mllm.caption_run import SORT_WINDOW

        align = batch_size * SORT_WINDOW
        self.start, self.stop = shard_range(len(self.videos), index, count, align=align)
        self.info = {"index": index, "count": count, "start": self.start, "stop": self.stop,
                     "items": len(self.videos), "inputs": caption_inputs_digest([v for v, _ in self.videos]),
                     "batch_size": batch_size, "align": align}

    def describe(self) -> str:
        span = (f"videos {self.start}..{self.stop - 1} of {len(self.videos)}: {self.videos[self.start][0]!r} .. "
                f"{self.videos[self.stop - 1][0]!r}" if self.stop > self.start else "no videos")
        return f"shard {self.index} of {self.count} ({span})"

    def mine(self) -> list[tuple[str, str]]:
        return self.videos[self.start : self.stop]

    def check_out(self, *, resume: bool, overwrite: bool) -> None:
        """Before the model is loaded: ``--out`` is not a finished captions file, and this
        shard's part is not there already (without ``--resume`` or ``--overwrite``)."""
        if self.out.exists() and not self.parts.dir.exists() and not overwrite:
            raise UsageError("--out", f"{self.out} is a finished captions file (merged already, or a single-process "
                                      "run's); pass --overwrite to write it again from shards, or give another --out")
        if not (resume or overwrite) and any(p.exists() for p in self.parts.files(self.index)):
            raise UsageError("--resume", f"{self.describe()}: {self.part} holds this shard's captions; pass "
                                         "--resume to finish it (or keep it), or --overwrite to start it over")

    def record(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        return {**settings, SHARD_KEY: self.info}

    def run(self, captioner: Any, settings: Mapping[str, Any], *, resume: bool, overwrite: bool, batch_size: int,
            progress: bool) -> int:
        """Caption this shard's videos into its part, then merge if every part is finished."""
        from vlr_plugins.mllm.caption_run import caption_videos
        from vlr_plugins.mllm.captions_file import CaptionsFile

        record = self.record(settings)
        if overwrite:
            for path in self.parts.files(self.index):
                path.unlink(missing_ok=True)
        else:
            self.check_out(resume=resume, overwrite=overwrite)
            self.parts.check_against(self.index, record)
            if self.parts.state(self.index) is None:
                print(f"{self.describe()}: its part {self.part} is finished already")
                return self.finish()
        self.parts.dir.mkdir(parents=True, exist_ok=True)
        try:
            with CaptionsFile(self.part, record, resume=True, resume_flag="--resume") as part:
                if part.cut_partial_line:
                    print(f"{self.part}: cut off a partial last line (a killed run's); that video is captioned again")
                run = caption_videos(captioner, self.mine(), part, batch_size=batch_size, progress=progress)
        except BaseException as e:
            print(f"{self.describe()} stopped ({type(e).__name__}: {e}); the captions written so far are kept in "
                  f"{self.part}: rerun the same command with --resume to finish the shard", file=sys.stderr)
            raise
        print(f"{self.describe()}: captioned {run.captioned}, already there {run.skipped}, failed {len(run.failed)}")
        code = 0
        if run.failed:
            print(f"{self.describe()}: {len(run.failed)} videos could not be decoded ({run.failed[0][0]!r} first); "
                  f"they are listed in {failures_path_of(self.part)} and in the merged file's failures",
                  file=sys.stderr)
            code = 1
        return max(code, self.finish())

    def finish(self, *, force: bool = False) -> int:
        """This shard's part is written: merge when every part is, else say which are still to come."""
        missing = [i for i, _ in self.parts.missing(self.count)]
        if missing:
            print(f"{self.describe()}: written to {self.part}; waiting for shard{'s' if len(missing) > 1 else ''} "
                  f"{', '.join(map(str, missing))} (the last shard to finish merges into {self.out}, or run "
                  "vlr caption --merge-only --out with it)")
            return 0
        return _merge(self.parts, self.count, who=self.describe(), force=force)


def _merge(parts: CaptionParts, count: int, *, who: str, force: bool) -> int:
    from vlr_plugins._merge_claim import DEFAULT_CLAIM_TIMEOUT, take_claim

    claim = parts.dir / "merging.json"
    try:
        parts.merge(count, check_only=True)  # what is refused is refused before the claim
        taken, held = take_claim(claim, timeout=DEFAULT_CLAIM_TIMEOUT, force=force)
    except (FileNotFoundError, UsageError):
        if parts.dir.exists() or not parts.out.exists():
            raise
        taken, held = False, None  # another shard merged (and removed the parts) meanwhile
    if not taken:
        if not parts.dir.exists():
            print(f"{who}: the parts were merged into {parts.out} by another shard")
        else:
            print(f"{who}: another process merges the parts into {parts.out} ({held.describe() if held else 'gone'})")
        return 0
    try:
        rows, failed = parts.merge(count)
    except BaseException:
        claim.unlink(missing_ok=True)  # ours: a refused merge leaves the parts as they were
        raise
    print(f"wrote {rows} captions to {parts.out} (merged from {count} shards)")
    if failed:
        print(f"videos that could not be decoded: {failures_path_of(parts.out)} ({failed}; a rerun of one process "
              "with --resume tries them again)")
    return failed_items_status(failed, rows + failed)


def merge_only(out: str | os.PathLike[str], count: int | None) -> int:
    """``--merge-only``: merge the parts of every shard, refusing a missing or mismatched one."""
    parts = CaptionParts(out, count)
    count = merge_count(parts.counts_found(), count, parts.dir, out)
    parts.count = count
    return _merge(parts, count, who="--merge-only", force=True)
