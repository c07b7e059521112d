"""Whole-row chunks (row_ranks, row_pair_ranks) are sized from every buffer they hold: with a tiny
max_chunk_bytes each chunk of float32 scores and each chunk of float64 transformed scores (the dual
softmax's queries whose positive scores <= 0) stays within it, and the ranks are unchanged."""

from __future__ import annotations

import torch

from _reference import random_problem
from vlr_plugins.eval import pair_ranks as pair_ranks_module
from vlr_plugins.eval import retrieval_recall
from vlr_plugins.eval import row_ranks as row_ranks_module
from vlr_plugins.eval.renorm import DualSoftmax
from vlr_plugins.eval.renorm_keys import DualSoftmaxKeys

BUDGET = 40_000  # bytes: a few queries x 200 texts


def test_tiny_max_chunk_bytes_bounds_every_row_chunk(monkeypatch):
    items, texts, owner = random_problem(n_items=50, dim=16, seed=3, noise=3.0)  # many positives score < 0
    owner = torch.arange(len(texts)) % len(items)  # not grouped: both directions row-wise
    want = retrieval_recall(items, texts, owner, renorm=DualSoftmax(100.0), rank_metrics=("map@10",),
                            return_ranks=True)
    chunks, direct = [], []
    gallery_scores, direct_rows = row_ranks_module.gallery_scores, DualSoftmaxKeys.direct_rows

    def recording_scores(matrix, query_side, queries, gallery, *args):
        chunks.append(len(queries) * len(gallery))
        return gallery_scores(matrix, query_side, queries, gallery, *args)

    def recording_direct(self, direction, scores, queries):
        direct.append(scores.numel())
        return direct_rows(self, direction, scores, queries)

    for module in (row_ranks_module, pair_ranks_module):
        monkeypatch.setattr(module, "gallery_scores", recording_scores)
    monkeypatch.setattr(DualSoftmaxKeys, "direct_rows", recording_direct)
    got = retrieval_recall(items, texts, owner, renorm=DualSoftmax(100.0), rank_metrics=("map@10",),
                           return_ranks=True, max_chunk_bytes=BUDGET)
    per_score = row_ranks_module.chunk_bytes_per_score(keys=True)
    assert len(chunks) > 3 and direct
    assert max(chunks) * per_score <= BUDGET
    # a float64 part and the float32 scores of its chunk, together within the budget
    assert max(direct) * row_ranks_module._BYTES_PER_DIRECT_ELEM + 4 * max(chunks) <= BUDGET
    for key in ("i2t_ranks", "t2i_ranks", "i2t_pair_ranks"):
        assert got[key].tolist() == want[key].tolist(), key


def test_chunk_size_cannot_exceed_the_budget():
    items, texts, owner = random_problem(n_items=50, dim=16, seed=3)
    from vlr_plugins.eval._tiles import ScoreMatrix

    matrix = ScoreMatrix(items, texts, owner, device=torch.device("cpu"), max_chunk_bytes=BUDGET, chunk_size=1000)
    per_chunk = row_ranks_module.rows_per_chunk(matrix, len(texts), keys=True)
    assert per_chunk * len(texts) * row_ranks_module.chunk_bytes_per_score(True) <= BUDGET
    assert row_ranks_module.rows_per_chunk(matrix, len(texts), None) > per_chunk
