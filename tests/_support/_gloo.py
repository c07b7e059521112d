"""Run a function on real gloo processes and collect what each rank returns (tests only)."""

from __future__ import annotations

import gc
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _entry(rank: int, fn: Callable[[int], Any], world_size: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=60))
    try:
        torch.save(fn(rank), Path(out_dir) / f"rank{rank}.pt")
        # DistributedDataParallel objects sit in reference cycles: freed now, while the group
        # exists, not at interpreter exit after it is destroyed (an abort, "terminate called
        # without an active exception", was seen once in CI)
        gc.collect()
        # a rank that tears down its gloo pairs while the other still talks to it
        # can abort the other process
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_on_ranks(fn: Callable[[int], Any], world_size: int, tmp_path: Path) -> list[Any]:
    """``[fn(0), ..., fn(world_size - 1)]``, each computed in its own process of one
    process group; ``fn`` must be a module-level function (it is pickled)."""
    mp.spawn(_entry, args=(fn, world_size, str(tmp_path / "pg_init"), str(tmp_path)), nprocs=world_size,
             join=True)
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(world_size)]
