"""grouped_ranks: texts listed grouped by item, every pair scored once, exact whatever the blocks.

Every result is checked against a plain reference (``_reference.reference_ranks``): the
full float64 score matrix, each query's gallery sorted by (-score, index).
"""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch

from _reference import near_tie_problem, random_problem, reference_ranks, torch_threads
from vlr_plugins.eval import retrieval_recall
from vlr_plugins.eval._tiles import ScoreMatrix
from vlr_plugins.eval.exact_ranks import exact_ranks
from vlr_plugins.eval._tile_workers import MIN_WORKER_TILE_ELEMS
from vlr_plugins.eval.grouped_ranks import diagonal_blocks, grouped_ranks, worker_budget

CPU = torch.device("cpu")


def grouped(problem):
    """The same problem with its texts listed by item (a stable sort of the owners)."""
    items, texts, owner = problem
    order = torch.argsort(owner, stable=True)
    return items, texts[order], owner[order]


@pytest.mark.parametrize("problem", [random_problem, near_tie_problem])
@pytest.mark.parametrize("chunk_size, max_chunk_bytes", [
    (None, 256 * 2**20),  # one block
    (7, 4096),  # 7 items (fewer where their texts pass 73) per block
    (1, 800),  # one item per block
    (None, 200),  # 25 scores a tile: blocks cut by their texts
])
def test_any_blocks_give_the_reference_ranks(cpu_blas, problem, chunk_size, max_chunk_bytes):
    items, texts, owner = grouped(problem())
    matrix = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=max_chunk_bytes,
                         chunk_size=chunk_size)
    bounds = diagonal_blocks(matrix)

    i2t, t2i = grouped_ranks(matrix, bounds)

    expected_i2t, expected_t2i = reference_ranks(items, texts, owner)
    assert i2t.tolist() == expected_i2t
    assert t2i.tolist() == expected_t2i
    assert (i2t.tolist(), t2i.tolist()) == tuple(r.tolist() for r in exact_ranks(matrix))


def test_blocks_cover_the_items_and_their_texts_fit_a_tile():
    items, texts, owner = grouped(random_problem(n_items=200, seed=2))
    for chunk_size, budget in ((None, 2**20), (None, 8 * 40), (16, 4096), (3, 8 * 30)):
        matrix = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=budget, chunk_size=chunk_size)
        bounds = diagonal_blocks(matrix)
        assert bounds[0] == 0 and bounds[-1] == len(items)
        assert all(a < b for a, b in pairwise(bounds))
        tile = budget // 8
        for a, b in pairwise(bounds):
            n_texts = int(((owner >= a) & (owner < b)).sum())
            assert (b - a) * n_texts <= tile, (chunk_size, budget, a, b)
            if chunk_size is not None:
                assert b - a <= chunk_size


def test_texts_out_of_item_order_or_too_many_for_a_tile_take_the_two_pass_engine():
    items, texts, owner = random_problem(seed=4)  # owners shuffled
    assert diagonal_blocks(ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=2**20)) is None
    items, texts, owner = grouped((items, texts, owner))
    assert diagonal_blocks(ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=2**20)) is not None
    most = int(torch.bincount(owner).max())  # a tile of fewer scores than one item's texts
    assert diagonal_blocks(ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=8 * (most - 1))) is None


def test_exact_ties_inside_and_across_blocks(cpu_blas):
    # every score is a multiple of 0.25; duplicated rows tie exactly with the positive,
    # before it, after it, in its own block and in others
    g = torch.Generator().manual_seed(5)
    owner = torch.cat([torch.arange(30), torch.randint(0, 30, (50,), generator=g)]).sort().values
    items = torch.randint(0, 2, (30, 4), generator=g).float() * 2 - 1
    texts = torch.randint(0, 2, (80, 4), generator=g).float() * 2 - 1
    items[[5, 20, 29]] = items[3].clone()
    texts[[7, 40, 79]] = texts[2].clone()
    i2t, t2i = reference_ranks(items, texts, owner)

    for chunk_size, budget in ((None, 2**20), (4, 256), (3, 160), (1, 40), (None, 200)):  # up to 5 texts an item
        matrix = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=budget, chunk_size=chunk_size)
        got = grouped_ranks(matrix, diagonal_blocks(matrix))
        assert got[0].tolist() == i2t, (chunk_size, budget)
        assert got[1].tolist() == t2i, (chunk_size, budget)
    with torch_threads(3):  # the same with 3 workers sharing the tiles
        matrix = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=8 * 3 * MIN_WORKER_TILE_ELEMS,
                             chunk_size=2)
        assert worker_budget(matrix)[0] == 3
        got = grouped_ranks(matrix, diagonal_blocks(matrix))
    assert got[0].tolist() == i2t
    assert got[1].tolist() == t2i


def test_retrieval_recall_gives_the_same_result_in_either_text_order():
    items, texts, owner = random_problem(n_items=120, seed=6)
    shuffled = retrieval_recall(items, texts, owner, return_ranks=True, max_chunk_bytes=4096)
    order = torch.argsort(owner, stable=True)

    got = retrieval_recall(items, texts[order], owner[order], return_ranks=True, max_chunk_bytes=4096)

    assert got["i2t_ranks"].tolist() == shuffled["i2t_ranks"].tolist()
    assert got["t2i_ranks"].tolist() == shuffled["t2i_ranks"][order].tolist()
    assert {k: v for k, v in got.items() if "ranks" not in k} == \
        {k: v for k, v in shuffled.items() if "ranks" not in k}


@pytest.mark.parametrize("problem", [random_problem, near_tie_problem])
@pytest.mark.parametrize("threads", [2, 3])
def test_tiles_shared_among_workers_give_the_reference_ranks(cpu_blas, problem, threads):
    items, texts, owner = grouped(problem(n_items=150, seed=7) if problem is random_problem else problem())
    with torch_threads(threads):
        # a budget for `threads` workers, and blocks of 5 items: many diagonal and other tiles each
        matrix = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=8 * threads * MIN_WORKER_TILE_ELEMS,
                             chunk_size=5)
        assert worker_budget(matrix) == (threads, MIN_WORKER_TILE_ELEMS)
        bounds = diagonal_blocks(matrix)
        assert len(bounds) - 1 > threads

        i2t, t2i = grouped_ranks(matrix, bounds)

        assert torch.get_num_threads() == threads
    expected_i2t, expected_t2i = reference_ranks(items, texts, owner)
    assert i2t.tolist() == expected_i2t
    assert t2i.tolist() == expected_t2i


def test_a_tile_of_three_buffers_takes_the_threads_share_where_memory_allows(monkeypatch):
    """A re-normalisation's rank pass (three buffers a worker) multiplies tiles of the plain
    engine's shape while its buffers fit ``max_chunk_bytes``; where they would not, 2 / 3 of
    them, so that every buffer stays within it."""
    items, texts, owner = grouped(random_problem(n_items=200, seed=8))
    monkeypatch.setenv("VLR_CPU_TILE_ELEMS", "4096")
    with torch_threads(1):
        roomy = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=2**28)
        assert worker_budget(roomy, 3) == worker_budget(roomy, 2) == (1, 4096)
        tight = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=3 * 4 * 2048)  # three buffers of 2,048
        assert worker_budget(tight, 2) == (1, 3072) and worker_budget(tight, 3) == (1, 2048)
