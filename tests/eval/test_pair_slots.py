"""Every positive pair's rank counted in the tiles of ``exact_ranks`` for texts in any order
(``pair_ranks.PairSlots``): equal to a full-matrix reference (each item's row of float64 scores
sorted by (-score, index)) and to the row-wise way (``row_pair_ranks``), with exact ties across
owners before, after and inside a positive's own tile, several texts per item, interleaved
(text j to item j mod N) and random orders, one worker or several; ties across tiles settled
in the tiles, not row-wise; items with far more texts than the mean, a score the two passes
saw differently, and the row-wise chunks within ``max_chunk_bytes``."""

from __future__ import annotations

import pytest
import torch

import vlr_plugins.eval._tile_workers as tile_workers_module
import vlr_plugins.eval.exact_ranks as exact_ranks_module
import vlr_plugins.eval.pair_ranks as pair_ranks_module
import vlr_plugins.eval.row_ranks as row_ranks_module
from _reference import gallery_order, random_problem, reference_ranks, score_matrix, torch_threads
from vlr_plugins.eval import retrieval_recall
from vlr_plugins.eval._tiles import ScoreMatrix
from vlr_plugins.eval.exact_ranks import exact_ranks
from vlr_plugins.eval.pair_ranks import row_pair_ranks, slot_cap

CPU = torch.device("cpu")


def reference_pair_ranks(items, texts, owner) -> list[int]:
    """Text j's place in its owner's row of the full float64 score matrix, best first, equal
    scores by lower index."""
    scores = score_matrix(items, texts)
    place = [{j: rank for rank, j in enumerate(gallery_order(scores[i]))} for i in range(len(items))]
    return [place[int(o)][j] for j, o in enumerate(owner)]


def tie_problem(order: str, seed: int = 0, n: int = 17, per: int = 3):
    """+-1 vectors in 4 dims: every cosine is a multiple of 0.25 (exact in float32 whatever the
    summation order), so most texts of a row tie; a few texts and items are exact duplicates,
    the duplicated texts belonging to other items. ``per`` texts per item, in ``order``:
    interleaved (text j to item j mod n) or random."""
    g = torch.Generator().manual_seed(seed)
    m = n * per
    owner = torch.arange(m) % n if order == "interleaved" else torch.arange(m)[torch.randperm(m, generator=g)] % n
    items = torch.randint(0, 2, (n, 4), generator=g).float() * 2 - 1
    texts = torch.randint(0, 2, (m, 4), generator=g).float() * 2 - 1
    texts[[9, 30, 44]] = texts[2].clone()  # owners 9, 13, 10 (interleaved) against 2's
    items[[5, 11]] = items[3].clone()
    return items, texts, owner


def uneven_problem(seed: int = 1):
    """1 to 4 texts per item in random order, plus ties: the random problem's layout on
    +-1 vectors."""
    _, _, owner = random_problem(n_items=20, seed=seed)
    g = torch.Generator().manual_seed(seed)
    items = torch.randint(0, 2, (20, 4), generator=g).float() * 2 - 1
    texts = torch.randint(0, 2, (len(owner), 4), generator=g).float() * 2 - 1
    return items, texts, owner


PROBLEMS = {
    "ties-interleaved": lambda: tie_problem("interleaved"),
    "ties-random": lambda: tie_problem("random"),
    "ties-uneven": uneven_problem,
    "random": lambda: random_problem(n_items=40, seed=4),
}
#: (chunk_size, max_chunk_bytes): one tile; a few texts per tile; one text per tile (no tie can
#: share a positive's own tile); single rows
TILINGS = [(None, 256 * 2**20), (5, 320), (4, 32), (1, 96)]


def recording_row_pairs(monkeypatch) -> list[int]:
    """The items ranked row-wise (the row-wise way spied on, not replaced)."""
    items: list[int] = []
    real = pair_ranks_module.row_pair_ranks

    def spy(matrix, queries, out, *args, **kwargs):
        items.extend(queries.tolist())
        return real(matrix, queries, out, *args, **kwargs)

    monkeypatch.setattr(pair_ranks_module, "row_pair_ranks", spy)
    return items


@pytest.mark.parametrize("problem", PROBLEMS, ids=list(PROBLEMS))
@pytest.mark.parametrize("chunk_size, max_chunk_bytes", TILINGS)
def test_every_pair_equals_the_reference_and_the_row_wise_way(cpu_blas, problem, chunk_size, max_chunk_bytes):
    items, texts, owner = PROBLEMS[problem]()
    assert bool((owner[1:] < owner[:-1]).any())  # not grouped: the engine takes exact_ranks
    matrix = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=max_chunk_bytes, chunk_size=chunk_size)

    i2t, t2i, pairs = exact_ranks(matrix, pair_ranks=True)

    want = reference_pair_ranks(items, texts, owner)
    assert pairs.tolist() == want
    row_wise = row_pair_ranks(matrix, matrix.arange(len(items)), torch.empty(len(texts), dtype=torch.long))
    assert pairs.tolist() == row_wise.tolist()
    assert (i2t.tolist(), t2i.tolist()) == reference_ranks(items, texts, owner)
    assert (i2t.tolist(), t2i.tolist()) == tuple(r.tolist() for r in exact_ranks(matrix))


def test_ties_across_tiles_are_settled_in_the_tiles(monkeypatch):
    # one text per tile: a tie is always in another tile than the positive, before or after
    # it, so no item needs the row-wise way, and every tie across owners is counted right
    items, texts, owner = tie_problem("interleaved", n=23, per=4)
    scores = score_matrix(items, texts)
    positive = scores[owner, torch.arange(len(texts))]
    other_owner = owner[None, :] != torch.arange(len(items))[:, None]
    assert int(((scores[owner] == positive[:, None]) & other_owner[owner]).sum()) > 100  # ties across owners
    matrix = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=32, chunk_size=4)
    assert matrix.tile_texts == 1 and matrix.tile_items == 4
    row_wise = recording_row_pairs(monkeypatch)

    _, _, pairs = exact_ranks(matrix, pair_ranks=True)

    assert row_wise == []
    assert pairs.tolist() == reference_pair_ranks(items, texts, owner)


def test_a_tie_inside_a_positive_tile_sends_its_item_row_wise(monkeypatch):
    items, texts, owner = tie_problem("interleaved")
    matrix = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=2**20)  # one tile
    row_wise = recording_row_pairs(monkeypatch)

    _, _, pairs = exact_ranks(matrix, pair_ranks=True)

    scores = score_matrix(items, texts)
    tied = {int(owner[j]) for j in range(len(texts)) if int((scores[owner[j]] == scores[owner[j], j]).sum()) > 1}
    assert set(row_wise) == tied
    assert pairs.tolist() == reference_pair_ranks(items, texts, owner)


@pytest.mark.parametrize("problem", ["ties-interleaved", "ties-random", "random"])
@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("chunk_size, worker_bytes", [(3, 240), (1, 96), (None, 200)])
def test_tiles_shared_among_workers_count_every_pair(cpu_blas, problem, threads, chunk_size, worker_bytes,
                                                     monkeypatch):
    monkeypatch.setattr(tile_workers_module, "MIN_WORKER_TILE_ELEMS", 4)
    items, texts, owner = PROBLEMS[problem]()
    with torch_threads(threads):
        matrix = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=threads * worker_bytes,
                             chunk_size=chunk_size)
        assert matrix.workers == threads
        assert -(-len(texts) // matrix.tile_texts) * -(-len(items) // matrix.tile_items) > threads

        _, _, pairs = exact_ranks(matrix, pair_ranks=True)

    assert pairs.tolist() == reference_pair_ranks(items, texts, owner)


def test_an_item_with_far_more_texts_is_ranked_row_wise(monkeypatch):
    items, texts, owner = tie_problem("random", n=17, per=3)
    extra = torch.randint(0, 2, (20, 4), generator=torch.Generator().manual_seed(9)).float() * 2 - 1
    texts = torch.cat([texts, extra])
    owner = torch.cat([owner, torch.full((20,), 6)])  # item 6: 23 texts, the others 3
    owner = owner[torch.randperm(len(owner), generator=torch.Generator().manual_seed(3))]
    texts = texts[torch.randperm(len(texts), generator=torch.Generator().manual_seed(3))]
    assert int((owner == 6).sum()) > slot_cap(len(items), len(texts))
    matrix = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=32, chunk_size=4)  # no own-tile ties
    row_wise = recording_row_pairs(monkeypatch)
    slots_seen = []
    real_slots = exact_ranks_module.PairSlots

    def recording_slots(*args):
        slots = real_slots(*args)
        slots_seen.append(slots.slots)
        return slots

    monkeypatch.setattr(exact_ranks_module, "PairSlots", recording_slots)

    _, _, pairs = exact_ranks(matrix, pair_ranks=True)

    assert row_wise == [6]
    assert slots_seen == [3]  # the bookkeeping holds the other items' slots only
    assert pairs.tolist() == reference_pair_ranks(items, texts, owner)


def test_a_failed_score_check_ranks_the_item_row_wise(monkeypatch):
    # a positive whose score in its tile differs from the first pass's (another BLAS shape):
    # its item is ranked row-wise, and every pair is still exact
    items, texts, owner = random_problem(n_items=40, seed=4)
    want = reference_pair_ranks(items, texts, owner)
    real_scores = exact_ranks_module.positive_scores

    def off_by_one_ulp(matrix):
        score, ties = real_scores(matrix)
        score[::7] = torch.nextafter(score[::7], torch.tensor(2.0))
        return score, ties

    monkeypatch.setattr(exact_ranks_module, "positive_scores", off_by_one_ulp)
    row_wise = recording_row_pairs(monkeypatch)
    matrix = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=4096, chunk_size=8)

    _, _, pairs = exact_ranks(matrix, pair_ranks=True)

    assert set(row_wise) == set(owner[::7].tolist())
    assert pairs.tolist() == want


def test_the_engine_takes_the_tiles_and_keeps_max_chunk_bytes(monkeypatch):
    # through retrieval_recall, texts interleaved: the tile and its work buffer within the budget,
    # no whole row scored for random data, and the row-wise chunks of tied items within it too
    budget = 2400
    for problem, row_wise_expected in ((random_problem(n_items=40, seed=4), False),
                                       (tie_problem("interleaved"), True)):
        items, texts, owner = problem
        rows: list[int] = []
        real = row_ranks_module.gallery_scores

        def recording(matrix, query_side, queries, gallery, *args, rows=rows, real=real):
            rows.append(len(queries) * len(gallery))
            return real(matrix, query_side, queries, gallery, *args)

        monkeypatch.setattr(pair_ranks_module, "gallery_scores", recording)
        monkeypatch.setattr(row_ranks_module, "gallery_scores", recording)
        matrix = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=budget)
        assert matrix.tile_items * matrix.tile_texts * 8 <= budget
        got = retrieval_recall(items, texts, owner, rank_metrics=("map@5", "ndcg@5"), return_ranks=True,
                               max_chunk_bytes=budget)
        assert got["i2t_pair_ranks"].tolist() == reference_pair_ranks(items, texts, owner)
        assert bool(rows) == row_wise_expected
        assert all(r * row_ranks_module.chunk_bytes_per_score(None) <= budget for r in rows)
