"""Which share of the work one process of a job array or a ``torchrun`` group takes.

Shared by the commands that scale out (``vlr precompute`` with ``align`` its batch size,
``vlr mine`` with ``align=1``):

- :func:`shard_range`: shard ``index`` of ``count`` takes the contiguous records
  ``[start, stop)``, so the parts put back in shard order are the input in its order; with
  ``align`` (a batch size) every boundary but the last falls on a multiple of ``align``, so
  each shard's batches are exactly the batches a single process makes of the same input;
- :func:`resolve_shard`: ``--shard-index I --shard-count N`` (a SLURM array:
  ``--shard-index $SLURM_ARRAY_TASK_ID``), or, under ``torchrun`` (``RANK`` / ``WORLD_SIZE``
  set, no shard options), the rank and world size; both given and disagreeing is refused.

Framework-free (imports neither torch nor an application): any layer may import it.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping
from pathlib import Path

from vlr_plugins.errors import UsageError

__all__ = ["add_shard_options", "check_shard_options", "local_rank", "merge_count", "parts_by_count", "resolve_shard",
           "shard_range", "torchrun_shard"]


def shard_range(n: int, index: int, count: int, *, align: int = 1) -> tuple[int, int]:
    """The records ``[start, stop)`` of shard ``index`` of ``count`` over ``n`` records: the
    ``ceil(n / align)`` blocks of ``align`` records split as evenly as whole blocks allow
    (``align=1``: ``[n*index//count, n*(index+1)//count)``). Deterministic: it depends on
    ``n``, ``index``, ``count`` and ``align`` only."""
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} is not in 0 .. {count - 1}")
    if align < 1:
        raise ValueError(f"align must be positive, found {align}")
    blocks = -(-n // align)
    return min(n, blocks * index // count * align), min(n, blocks * (index + 1) // count * align)


def check_shard_options(index: int | None, count: int | None) -> None:
    """``--shard-index`` and ``--shard-count`` come together, and the index is below the count."""
    if index is None and count is not None:
        raise UsageError("--shard-index", f"needed with --shard-count {count} (e.g. $SLURM_ARRAY_TASK_ID)")
    if index is not None and count is None:
        raise UsageError("--shard-count", "needed with --shard-index (the tasks of the job array)")
    if index is not None and count is not None and not 0 <= index < count:
        raise UsageError("--shard-index", f"expected 0 .. {count - 1} (--shard-count {count}), found {index}")


def _env_int(env: Mapping[str, str], name: str, low: int) -> int:
    raw = env.get(name, "")
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if value < low:
        raise UsageError(name, f"torchrun sets it to an integer >= {low}; this process has {name}={raw!r}")
    return value


def torchrun_shard(env: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """``(RANK, WORLD_SIZE)`` when this process was started by ``torchrun`` (both set), else None."""
    env = os.environ if env is None else env
    if "RANK" not in env and "WORLD_SIZE" not in env:
        return None
    size = _env_int(env, "WORLD_SIZE", 1)
    rank = _env_int(env, "RANK", 0)
    if rank >= size:
        raise UsageError("RANK", f"expected 0 .. {size - 1} (WORLD_SIZE={size}), found {rank}")
    return rank, size


def local_rank(env: Mapping[str, str] | None = None) -> int | None:
    """``LOCAL_RANK`` (this process' device on its node under ``torchrun``), or None."""
    env = os.environ if env is None else env
    return _env_int(env, "LOCAL_RANK", 0) if "LOCAL_RANK" in env else None


def resolve_shard(index: int | None, count: int | None,
                  env: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """This process' ``(index, count)``, or None when it does all the work.

    Explicit options win when they agree with ``torchrun``'s ``RANK`` / ``WORLD_SIZE``; they
    must agree (a job array inside a torchrun group would do some shards twice and others
    never). Without options, a torchrun group of ``WORLD_SIZE > 1`` shards by rank.
    """
    check_shard_options(index, count)
    ranked = torchrun_shard(env)
    if index is not None and count is not None:
        if ranked is not None and ranked != (index, count) and ranked[1] > 1:
            raise UsageError("--shard-index", f"{index} of --shard-count {count}, but torchrun started this "
                                              f"process as rank {ranked[0]} of {ranked[1]} (RANK, WORLD_SIZE); "
                                              "under torchrun drop the shard options (each rank takes its "
                                              "shard), or give the same")
        return index, count
    if ranked is not None and ranked[1] > 1:
        return ranked
    return None


def add_shard_options(parser: argparse.ArgumentParser, work: str, count_help: str = "the shards of the job array "
                      "(with --shard-index)", merge_help: str = "merge the parts of finished shards into --out (the "
                      "last shard to finish does it itself)") -> None:
    """``--shard-index``, ``--shard-count`` and ``--merge-only`` of a command that scales out;
    ``work``: what a shard does with its share (e.g. "encodes a contiguous share of the items
    into its own part")."""
    from vlr_plugins._argtypes import non_negative_int, positive_int

    parser.add_argument("--shard-index", type=non_negative_int,
                        help=f"this process' shard of a job array (e.g. $SLURM_ARRAY_TASK_ID): it {work}")
    parser.add_argument("--shard-count", type=positive_int, help=count_help)
    parser.add_argument("--merge-only", action="store_true", help=merge_help)


def parts_by_count(folder: Path, pattern: re.Pattern[str]) -> dict[int, list[str]]:
    """Shard count -> the names in ``folder`` that ``pattern`` matches (its group 2: the count)."""
    found: dict[int, list[str]] = {}
    if folder.is_dir():
        for entry in sorted(folder.iterdir()):
            m = pattern.match(entry.name)
            if m:
                found.setdefault(int(m[2]), []).append(entry.name)
    return found


def merge_count(found: dict[int, list[str]], count: int | None, folder: Path, out: object) -> int:
    """The shard count ``--merge-only`` merges: ``count`` when parts of it are in ``folder``, else
    the one count found; a UsageError for none, several without ``count``, or another ``count``."""
    if not found:
        raise UsageError("--merge-only", f"no parts of {out} to merge: {folder} does not exist or holds none")
    if count is None:
        if len(found) > 1:
            raise UsageError("--shard-count", f"{folder} holds parts of runs with {' and '.join(map(str, found))} "
                                              "shards; pass the --shard-count of the run to merge")
        return next(iter(found))
    if count not in found:
        raise UsageError("--shard-count", f"{count}, but the parts in {folder} are of a run with "
                                          f"{', '.join(map(str, found))} shards ({found[next(iter(found))][0]})")
    return count
