"""_tile_workers: tiles shared among CPU threads, each running torch single-threaded."""

from __future__ import annotations

import threading

import pytest
import torch

from _reference import torch_threads
from vlr_plugins.eval._tile_workers import (
    MIN_WORKER_TILE_ELEMS,
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
