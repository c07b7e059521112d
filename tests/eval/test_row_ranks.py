"""row_ranks: ranks from whole score rows, and re-ranking of each query's top candidates.

Checked against the plain reference of ``_reference``, which re-orders a query's top k
as the re-ranker would.
"""

from __future__ import annotations

import pytest
import torch

from _reference import gallery_order, random_problem, recalls, reference_ranks
from vlr_plugins.eval import retrieval_recall
from vlr_plugins.eval._tiles import ScoreMatrix
from vlr_plugins.eval.row_ranks import row_ranks, top_candidates

KS = (1, 5, 10)


@pytest.mark.parametrize("chunk_size", [None, 1, 7])
def test_row_ranks_of_any_queries_are_the_reference_ranks(chunk_size):
    items, texts, owner = random_problem(seed=6)
    matrix = ScoreMatrix(items, texts, owner, device=torch.device("cpu"), max_chunk_bytes=4096,
                         chunk_size=chunk_size)
    i2t, t2i = reference_ranks(items, texts, owner)
    some_items, some_texts = torch.tensor([5, 0, 59, 5]), torch.arange(0, len(texts), 3)

    assert row_ranks(matrix, "i2t", some_items).tolist() == [i2t[i] for i in some_items]
    assert row_ranks(matrix, "t2i", some_texts).tolist() == [t2i[j] for j in some_texts]


def test_top_candidates_are_the_best_scores_ties_by_lower_index():
    g = torch.Generator().manual_seed(4)
    scores = torch.randint(0, 4, (6, 20), generator=g).float()  # ties everywhere, also at the k-th place

    got = top_candidates(scores, 5)

    assert got.tolist() == [gallery_order(row)[:5] for row in scores]


def test_reversing_the_candidates_moves_ranks_as_the_reference_predicts():
    items, texts, owner = random_problem(seed=7)
    k = 8
    calls = []

    def reverse(query_indices, candidate_indices, direction):
        calls.append((direction, query_indices.tolist(), tuple(candidate_indices.shape)))
        # scores rising along the list: the last candidate becomes the first
        return torch.arange(k, dtype=torch.float32).expand(len(query_indices), k)

    got = retrieval_recall(items, texts, owner, ks=KS, rerank=reverse, rerank_k=k,
                           rerank_batch=16, return_ranks=True)

    i2t, t2i = reference_ranks(items, texts, owner, rerank_order=lambda top: top[::-1], k=k)
    assert got["i2t_ranks"].tolist() == i2t
    assert got["t2i_ranks"].tolist() == t2i
    # queries outside the top k kept their first-stage rank; some inside moved
    first_i2t, _ = reference_ranks(items, texts, owner)
    assert any(a != b for a, b in zip(i2t, first_i2t))
    assert all(a == b for a, b in zip(i2t, first_i2t) if b >= k)
    # batched: every query once per direction, at most 16 at a time, k candidates each
    for direction, n in (("i2t", len(items)), ("t2i", len(texts))):
        mine = [c for c in calls if c[0] == direction]
        assert sorted(q for c in mine for q in c[1]) == list(range(n))
        assert all(len(q) <= 16 and shape == (len(q), k) for _, q, shape in mine)


@pytest.mark.parametrize("rerank_k", [1, 5, 10_000])
def test_a_rerank_returning_the_original_scores_changes_nothing(rerank_k):
    items, texts, owner = random_problem(seed=8)
    first_stage = retrieval_recall(items, texts, owner, ks=KS, return_ranks=True)
    unit_items = items / items.norm(dim=1, keepdim=True)
    unit_texts = texts / texts.norm(dim=1, keepdim=True)

    def same_scores(query_indices, candidate_indices, direction):
        q, g = (unit_items, unit_texts) if direction == "i2t" else (unit_texts, unit_items)
        return torch.einsum("qd,qkd->qk", q[query_indices], g[candidate_indices])

    def constant(query_indices, candidate_indices, direction):
        return torch.zeros(candidate_indices.shape)

    for rerank in (same_scores, constant):
        got = retrieval_recall(items, texts, owner, ks=KS, rerank=rerank, rerank_k=rerank_k,
                               return_ranks=True)
        assert got["i2t_ranks"].tolist() == first_stage["i2t_ranks"].tolist()
        assert got["t2i_ranks"].tolist() == first_stage["t2i_ranks"].tolist()
        assert recalls(got) == recalls(first_stage)


def test_rerank_candidates_are_deterministic_under_ties():
    # all texts identical: every candidate list is the lowest indices in order
    items = torch.randn(5, 3)
    texts = torch.ones(12, 3)
    owner = torch.arange(12) % 5
    seen = {}

    def record(query_indices, candidate_indices, direction):
        seen[direction] = candidate_indices
        return torch.zeros(candidate_indices.shape)

    retrieval_recall(items, texts, owner, rerank=record, rerank_k=4, rerank_batch=100)
    assert seen["i2t"].tolist() == [[0, 1, 2, 3]] * 5


def test_a_rerank_of_the_wrong_shape_is_an_error():
    items, texts, owner = random_problem()
    with pytest.raises(ValueError, match=r"rerank\(i2t\) must return scores of shape \(4, 3\), found \(4,\)"):
        retrieval_recall(items, texts, owner, rerank=lambda q, c, d: torch.zeros(len(q)),
                         rerank_k=3, rerank_batch=4)
