"""Tiles visited by several CPU threads at once, each running torch single-threaded.

On a CPU a tile's work is one matrix product and a few element-wise passes over its
scores (comparisons, counts). torch parallelises each op inside itself, which suits the
product but not the passes: the counts are matrix-vector products that MKL runs on one
thread, and every op's threads meet at a barrier, so at 2 threads the counting cost as
much as at 1 while the product halved (measured: the grouped engine at 1.03x a bare
chunked multiply with 1 thread, 1.43x with 2, docs/benchmarks.md). Here each of
``torch.get_num_threads()`` workers takes whole tiles, one after another, with torch's
own threads set to 1 for the duration (and restored): every op of a tile runs at
single-thread efficiency and the tiles run side by side (torch's ops release the GIL).

Each worker has its own buffers (a tile, its work buffer, its rows of embeddings) and its
own copies of any accumulator several tiles add to; the budget of one tile is the whole
budget divided among the workers, so the memory bound is unchanged. A budget too small
for one worker per thread (tests' tiny tiles) gets fewer workers, down to one, which
runs in the calling thread with torch's threads untouched.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

from vlr_plugins.eval._cpu_blas import blas_threads

__all__ = ["MIN_WORKER_TILE_ELEMS", "PARTS_PER_WORKER", "TAIL_SPLIT", "column_tasks", "one_thread_per_worker",
           "split_range", "tile_workers", "visit_in_parallel"]

#: the fewest scores a worker's tile holds: below that, fewer workers
MIN_WORKER_TILE_ELEMS = 2**16
#: tasks per worker, at least, when a pass is cut into tasks: the workers then finish within
#: a small task of each other (with one task per column of tiles, 11 columns on 2 workers
#: left one idle for a column: ~9 % of the pass, measured at 5K x 25K)
PARTS_PER_WORKER = 16
#: ... and no task longer than 1 / (TAIL_SPLIT x workers) of the tiles left from its start, so
#: the last ones shrink (guided self-scheduling's rule): with equal parts alone, QB-Norm's bank
#: pass (36 tasks of ~90 ms on 2 workers) left one worker idle for 0.10-0.12 s of its 2.2 s
TAIL_SPLIT = 4

_DONE = object()
State = TypeVar("State")
Task = TypeVar("Task")


def tile_workers(tile_elems: int, device: torch.device, threads: int | None = None) -> int:
    """How many workers share a budget of ``tile_elems`` scores: on CPU one per torch
    thread (``threads``, default ``torch.get_num_threads()``) while each keeps at least
    :data:`MIN_WORKER_TILE_ELEMS`; 1 on other devices (a GPU runs one tile at a time)."""
    if torch.device(device).type != "cpu":
        return 1
    threads = threads or torch.get_num_threads()
    return max(1, min(threads, tile_elems // MIN_WORKER_TILE_ELEMS))


def split_range(n: int, parts: int) -> list[range]:
    """0..n-1 in ``parts`` consecutive ranges of near-equal length (``n`` when n < parts)."""
    parts = max(1, min(parts, n))
    return [range(i * n // parts, (i + 1) * n // parts) for i in range(parts)]


def column_tasks(n_cols: int, n_rows: int, workers: int) -> list[tuple[int, range]]:
    """A pass over ``n_cols`` columns of ``n_rows`` tiles as (column, its row tiles) tasks in
    column order, for :func:`visit_in_parallel`: one task a column for one worker; for several,
    each column in parts of near-equal length, at least :data:`PARTS_PER_WORKER` a worker over
    the pass, cut further where a part is longer than 1 / (:data:`TAIL_SPLIT` x workers) of
    the tiles left from its start. So the workers finish within a tile or two of each other,
    and the first three quarters of the pass keep the equal parts."""
    if workers <= 1:
        return [(c, range(n_rows)) for c in range(n_cols)]
    parts = PARTS_PER_WORKER * workers // max(1, n_cols) + 1
    tasks, left = [], n_cols * n_rows
    for c in range(n_cols):
        for rows in split_range(n_rows, parts):
            while len(rows):
                size = min(len(rows), -(-left // (TAIL_SPLIT * workers)))
                tasks.append((c, rows[:size]))
                rows, left = rows[size:], left - size
    return tasks


@contextlib.contextmanager
def one_thread_per_worker(workers: int) -> Iterator[None]:
    """With several workers, torch's intra-op threads and numpy's BLAS threads
    (:mod:`~vlr_plugins.eval._cpu_blas`) set to 1 inside (restored on exit); with one, nothing
    changes."""
    if workers <= 1:
        yield
        return
    with blas_threads(1):
        yield


def visit_in_parallel(tasks: Sequence[Task], visit: Callable[[State, Task], None],
                      states: Sequence[State]) -> None:
    """``visit(state, task)`` for every task: one worker per state, each taking the next
    task as it finishes one (so a worker slowed by other load takes fewer). A single state
    visits every task in order, in this thread. The first error of any worker is raised
    once every worker has stopped (the others stop before their next task)."""
    if len(states) == 1 or len(tasks) <= 1:
        for task in tasks:
            visit(states[0], task)
        return
    lock, pending, failed = threading.Lock(), iter(tasks), threading.Event()

    def work(state: State) -> None:
        # a new thread's OpenMP team size is the process default until ATen first sets it from
        # torch's (1 in the workers): asked here, so that a BLAS called before any other op
        # (oneDNN's, MKL's) does not run the first tile's product on every core
        torch.get_num_threads()
        while not failed.is_set():
            with lock:
                task = next(pending, _DONE)
            if task is _DONE:
                return
            try:
                visit(state, task)
            except BaseException:
                failed.set()
                raise

    with ThreadPoolExecutor(max_workers=len(states), thread_name_prefix="vlr-tiles") as pool:
        futures = [pool.submit(work, state) for state in states]
    for future in futures:
        future.result()
