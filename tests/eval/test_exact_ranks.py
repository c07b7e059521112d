"""exact_ranks: both directions from one pass over the tiles, exact whatever the tiling.

Every result is checked against a plain reference (``_reference.reference_ranks``): the
full float64 score matrix, each query's gallery sorted by (-score, index).
"""

from __future__ import annotations

import pytest
import torch

import vlr_plugins.eval._tile_workers as tile_workers_module
import vlr_plugins.eval.exact_ranks as exact_ranks_module
from _reference import near_tie_problem, random_problem, reference_ranks, torch_threads
from vlr_plugins.eval import retrieval_recall
from vlr_plugins.eval._tiles import ScoreMatrix
from vlr_plugins.eval.exact_ranks import best_positives, exact_ranks, positive_scores

CPU = torch.device("cpu")


@pytest.mark.parametrize("problem", [random_problem, near_tie_problem])
@pytest.mark.parametrize("chunk_size, max_chunk_bytes", [
    (None, 256 * 2**20),  # one tile
    (7, 4096),  # 7 items x 73 texts
    (1, 800),  # single rows
    (64, 2000),  # 64 items x 3 texts
    (None, 8),  # 1 x 1
])
def test_any_tiling_gives_the_reference_ranks(cpu_blas, problem, chunk_size, max_chunk_bytes):
    items, texts, owner = problem()
    matrix = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=max_chunk_bytes,
                         chunk_size=chunk_size)

    i2t, t2i = exact_ranks(matrix)

    expected_i2t, expected_t2i = reference_ranks(items, texts, owner)
    assert i2t.tolist() == expected_i2t
    assert t2i.tolist() == expected_t2i


def test_exact_ties_across_and_inside_tiles(cpu_blas):
    # every score is a multiple of 0.25; duplicated rows tie exactly with the positive,
    # before it, after it, in its own tile and in others
    g = torch.Generator().manual_seed(5)
    owner = torch.cat([torch.arange(30), torch.randint(0, 30, (50,), generator=g)])
    items = torch.randint(0, 2, (30, 4), generator=g).float() * 2 - 1
    texts = torch.randint(0, 2, (80, 4), generator=g).float() * 2 - 1
    items[[5, 20, 29]] = items[3].clone()
    texts[[7, 40, 79]] = texts[2].clone()
    i2t, t2i = reference_ranks(items, texts, owner)

    for chunk_size, budget in ((None, 2**20), (4, 256), (3, 96), (1, 64)):
        got = retrieval_recall(items, texts, owner, chunk_size=chunk_size,
                               max_chunk_bytes=budget, return_ranks=True)
        assert got["i2t_ranks"].tolist() == i2t, (chunk_size, budget)
        assert got["t2i_ranks"].tolist() == t2i, (chunk_size, budget)


def test_positive_and_best_scores_match_the_score_matrix():
    items, texts, owner = random_problem(seed=1)
    matrix = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=4096)

    positive_score, ties_in_tile = positive_scores(matrix)
    best_score, best_text = best_positives(matrix, positive_score)

    full = items / items.norm(dim=1, keepdim=True) @ (texts / texts.norm(dim=1, keepdim=True)).T
    own = full[owner, torch.arange(len(texts))]
    assert torch.allclose(positive_score, own, atol=1e-6)
    assert (ties_in_tile == 1).all()  # random data: only the positive itself
    for i in range(len(items)):
        mine = (owner == i).nonzero().flatten()
        assert best_score[i] == positive_score[mine].max()
        assert best_text[i] == mine[positive_score[mine] == best_score[i]].min()


def test_a_failed_score_check_recomputes_the_query(monkeypatch):
    # if a positive's score seen inside its tile differs from the one used as threshold
    # (a BLAS giving other bits for another shape), that query is recomputed whole
    items, texts, owner = random_problem(seed=3)
    expected = retrieval_recall(items, texts, owner, chunk_size=8, return_ranks=True)
    real_scores, real_rows = exact_ranks_module.positive_scores, exact_ranks_module.row_ranks
    recomputed = []

    def off_by_one_ulp(matrix):
        score, ties = real_scores(matrix)
        score[::7] = torch.nextafter(score[::7], torch.tensor(2.0))
        return score, ties

    def spy(matrix, direction, queries, *args):
        recomputed.append((direction, len(queries)))
        return real_rows(matrix, direction, queries, *args)

    monkeypatch.setattr(exact_ranks_module, "positive_scores", off_by_one_ulp)
    monkeypatch.setattr(exact_ranks_module, "row_ranks", spy)

    got = retrieval_recall(items, texts, owner, chunk_size=8, return_ranks=True)

    assert {d for d, _ in recomputed} == {"i2t", "t2i"}
    assert dict(recomputed)["t2i"] == len(range(0, len(texts), 7))
    assert got["i2t_ranks"].tolist() == expected["i2t_ranks"].tolist()
    assert got["t2i_ranks"].tolist() == expected["t2i_ranks"].tolist()


@pytest.mark.parametrize("problem", [random_problem, near_tie_problem])
@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("chunk_size, worker_bytes", [(7, 2048), (1, 800), (None, 200)])
def test_tiles_shared_among_workers_give_the_reference_ranks(cpu_blas, problem, threads, chunk_size, worker_bytes,
                                                             monkeypatch):
    # workers down to 16-score tiles, so that these small problems have many tiles of each kind
    monkeypatch.setattr(tile_workers_module, "MIN_WORKER_TILE_ELEMS", 16)
    items, texts, owner = problem()
    with torch_threads(threads):
        matrix = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=threads * worker_bytes,
                             chunk_size=chunk_size)
        assert matrix.workers == threads
        assert -(-len(texts) // matrix.tile_texts) * -(-len(items) // matrix.tile_items) > threads

        i2t, t2i = exact_ranks(matrix)

        assert torch.get_num_threads() == threads
    expected_i2t, expected_t2i = reference_ranks(items, texts, owner)
    assert i2t.tolist() == expected_i2t
    assert t2i.tolist() == expected_t2i
