"""_tile_workers: tiles shared among CPU threads, each running torch single-threaded."""

from __future__ import annotations

import math
import threading

import pytest
import torch

from _reference import torch_threads
from vlr_plugins.eval._tile_workers import (
    MIN_WORKER_TILE_ELEMS,
    PARTS_PER_WORKER,
    TAIL_SPLIT,
    column_tasks,
    one_thread_per_worker,
    tile_workers,
    visit_in_parallel,
)


def test_every_task_is_visited_once_by_some_worker():
    states = [[] for _ in range(3)]
    visit_in_parallel(range(40), lambda state, task: state.append(task), states)
    visited = sorted(task for state in states for task in state)
    assert visited == list(range(40))


def test_one_state_visits_in_order_in_the_calling_thread():
    seen = []
    visit_in_parallel(range(5), lambda state, task: seen.append((task, threading.get_ident())), [None])
    assert [t for t, _ in seen] == list(range(5))
    assert {ident for _, ident in seen} == {threading.get_ident()}


def test_several_workers_run_in_other_threads_at_once():
    # each of two workers waits at a barrier for the other: only concurrent workers get past it
    barrier = threading.Barrier(2, timeout=30)
    idents = set()

    def visit(state, task):
        idents.add(threading.get_ident())
        barrier.wait()

    visit_in_parallel([0, 1], visit, [None, None])
    assert len(idents) == 2 and threading.get_ident() not in idents


def test_a_worker_error_is_raised_and_stops_the_others():
    visited = []

    def visit(state, task):
        visited.append(task)
        if task == 3:
            raise ValueError("tile 3")

    with pytest.raises(ValueError, match="tile 3"):
        visit_in_parallel(range(1000), visit, [None, None])
    assert len(visited) < 1000


def test_worker_count_follows_threads_and_budget():
    cpu = torch.device("cpu")
    assert tile_workers(2**20, cpu, threads=4) == 4
    assert tile_workers(3 * MIN_WORKER_TILE_ELEMS, cpu, threads=4) == 3
    assert tile_workers(MIN_WORKER_TILE_ELEMS - 1, cpu, threads=4) == 1
    assert tile_workers(2**30, torch.device("cuda"), threads=4) == 1
    assert tile_workers(2**20, cpu, threads=1) == 1


def test_torch_threads_are_one_inside_and_restored_after_even_on_error():
    with torch_threads(2):
        with one_thread_per_worker(2):
            inside = torch.get_num_threads()
            seen_by_workers = []
            visit_in_parallel([0, 1], lambda s, t: s.append(torch.get_num_threads()), [seen_by_workers] * 2)
        assert inside == 1 and seen_by_workers == [1, 1]
        assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError), one_thread_per_worker(2):
            raise RuntimeError("boom")
        assert torch.get_num_threads() == 2
        with one_thread_per_worker(1):
            assert torch.get_num_threads() == 2


@pytest.mark.parametrize("n_cols, n_rows, workers", [(4, 138, 2), (63, 63, 2), (1, 5, 2), (3, 1, 4), (11, 40, 3), (7, 9, 1)])
def test_column_tasks_cover_every_tile_once_in_column_order_and_shrink_at_the_end(n_cols, n_rows, workers):
    tasks = column_tasks(n_cols, n_rows, workers)
    tiles = [(c, r) for c, rows in tasks for r in rows]
    assert tiles == [(c, r) for c in range(n_cols) for r in range(n_rows)]
    assert all(len(rows) > 0 for _, rows in tasks)
    if workers == 1:
        assert [c for c, _ in tasks] == list(range(n_cols))
        return
    total = n_cols * n_rows
    assert len(tasks) >= min(total, PARTS_PER_WORKER * workers)
    left = total
    for _, rows in tasks:  # no task longer than its share of what is left
        assert len(rows) <= max(1, -(-left // (TAIL_SPLIT * workers)))
        left -= len(rows)
    assert len(tasks[-1][1]) == 1
    # the equal parts stay as they were while much is left: no more than a few tasks added
    assert len(tasks) <= PARTS_PER_WORKER * workers + n_cols + TAIL_SPLIT * workers * (1 + math.log(total))
