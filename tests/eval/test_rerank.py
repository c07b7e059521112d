"""rerank_pairs: each query with each of its candidates, as (item, text) pairs, query by query."""

from __future__ import annotations

import torch

from vlr_plugins.eval import rerank_pairs


def test_image_to_text_pairs_take_the_queries_as_items():
    items, texts = rerank_pairs(torch.tensor([0, 3]), torch.tensor([[5, 7, 1], [7, 2, 0]]), "i2t")
    assert items.tolist() == [0, 0, 0, 3, 3, 3] and texts.tolist() == [5, 7, 1, 7, 2, 0]


def test_text_to_image_pairs_take_the_queries_as_texts():
    items, texts = rerank_pairs(torch.tensor([4, 9]), torch.tensor([[1, 2], [2, 0]]), "t2i")
    assert items.tolist() == [1, 2, 2, 0] and texts.tolist() == [4, 4, 9, 9]


def test_scores_of_the_pairs_reshape_to_queries_by_candidates():
    queries, candidates = torch.tensor([2, 0, 1]), torch.tensor([[3, 1], [0, 2], [1, 1]])
    items, texts = rerank_pairs(queries, candidates, "i2t")
    scores = (10 * items + texts).view(3, 2)
    assert scores.tolist() == [[23, 21], [0, 2], [11, 11]]
