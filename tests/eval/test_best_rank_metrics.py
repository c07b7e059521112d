"""MdR, MnR and MRR@k of the best positive, both directions, from the exact engine: equal to a
full-matrix reference written here (ties and several texts per item included), to
torchmetrics' RetrievalMRR, and to CLIP4Clip / UMT's ``np.median(ind) + 1`` / ``np.mean(ind) + 1``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vlr_plugins.eval import rank_metrics, retrieval_recall

METRICS = ("mdr", "mnr", "mrr@1", "mrr@5", "mrr@10")


def reference_ranks(items: torch.Tensor, texts: torch.Tensor, owner: torch.Tensor) -> tuple[list[int], list[int]]:
    """0-based rank of each item's best text and each text's owner on the whole cosine matrix, ties
    broken by gallery index (a candidate with the positive's score is ahead only at a lower index)."""
    unit = torch.nn.functional.normalize
    scores = (unit(items.double(), dim=-1) @ unit(texts.double(), dim=-1).T).tolist()
    def rank(row: list[float], positives: list[int]) -> int:
        best = min(positives, key=lambda j: (-row[j], j))
        return sum(1 for j, s in enumerate(row) if s > row[best] or (s == row[best] and j < best))
    i2t = [rank(scores[i], [t for t in range(len(owner)) if owner[t] == i]) for i in range(len(items))]
    columns = [[scores[i][t] for i in range(len(items))] for t in range(len(owner))]
    t2i = [rank(columns[t], [int(owner[t])]) for t in range(len(owner))]
    return i2t, t2i


def reference_metrics(ranks: list[int]) -> dict[str, float]:
    ind = np.array(ranks)
    out = {"mdr": float(np.median(ind) + 1), "mnr": float(np.mean(ind) + 1)}  # CLIP4Clip / UMT
    for k in (1, 5, 10):
        out[f"mrr@{k}"] = sum(1 / (r + 1) for r in ranks if r < k) / len(ranks)
    return out


def world(seed: int, n: int = 23, per: int = 3, ties: bool = True):
    """``ties``: vectors of +-1 in 4 dims, whose cosines are exact multiples of 0.25 (most of them
    tie), with exact duplicates; else Gaussian texts near their item."""
    g = torch.Generator().manual_seed(seed)
    owner = torch.arange(n).repeat_interleave(per)[torch.randperm(n * per, generator=g)]
    if ties:
        items = torch.randint(0, 2, (n, 4), generator=g).float() * 2 - 1
        texts = torch.randint(0, 2, (n * per, 4), generator=g).float() * 2 - 1
        texts[5], items[7] = texts[4], items[3]
    else:
        items = torch.randn(n, 12, generator=g)
        texts = items[owner] + 1.2 * torch.randn(n * per, 12, generator=g)
    return items, texts, owner


@pytest.mark.parametrize("ties", [True, False], ids=["ties", "gaussian"])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("chunk_size", [None, 4])
def test_both_directions_equal_the_full_matrix_reference(seed, chunk_size, ties):
    items, texts, owner = world(seed, ties=ties)
    got = retrieval_recall(items, texts, owner, rank_metrics=METRICS, chunk_size=chunk_size, return_ranks=True)
    i2t, t2i = reference_ranks(items, texts, owner)
    assert got["i2t_ranks"].tolist() == i2t and got["t2i_ranks"].tolist() == t2i
    for direction, ranks in (("i2t", i2t), ("t2i", t2i)):
        want = reference_metrics(ranks)
        for metric in METRICS:
            assert got[f"{direction}_{metric}"] == pytest.approx(want[metric], rel=1e-12), (direction, metric)


def test_an_even_count_takes_the_middle_twos_mean_and_an_odd_one_the_middle():
    assert rank_metrics(torch.tensor([0, 1, 5, 9]), ["mdr"])["mdr"] == 4.0  # 1-based 1, 2, 6, 10
    assert rank_metrics(torch.tensor([3, 0, 9]), ["mdr", "mnr"]) == {"mdr": 4.0, "mnr": 5.0}


def test_mrr_equals_torchmetrics_retrieval_mrr():
    tm = pytest.importorskip("torchmetrics.retrieval")
    items, texts, owner = world(5, ties=False)
    got = retrieval_recall(items, texts, owner, rank_metrics=("mrr@1", "mrr@5", "mrr@10"))
    unit = torch.nn.functional.normalize
    scores = unit(items, dim=-1) @ unit(texts, dim=-1).T
    n, m = scores.shape
    # text -> image: one relevant item per text query; image -> text: all of the item's texts relevant
    t2i_preds, t2i_target = scores.T.flatten(), (torch.arange(n)[None, :] == owner[:, None]).flatten()
    t2i_index = torch.arange(m).repeat_interleave(n)
    i2t_preds, i2t_target = scores.flatten(), (owner[None, :] == torch.arange(n)[:, None]).flatten()
    i2t_index = torch.arange(n).repeat_interleave(m)
    for k in (1, 5, 10):
        mrr = tm.RetrievalMRR(top_k=k)
        assert got[f"t2i_mrr@{k}"] == pytest.approx(float(mrr(t2i_preds, t2i_target, indexes=t2i_index)), abs=1e-6)
        mrr = tm.RetrievalMRR(top_k=k)
        assert got[f"i2t_mrr@{k}"] == pytest.approx(float(mrr(i2t_preds, i2t_target, indexes=i2t_index)), abs=1e-6)


def test_reduced_precision_refuses_what_it_cannot_make_exact():
    items, texts, owner = world(0)
    got = retrieval_recall(items, texts, owner, precision="fp16", ks=(1, 5, 10), rank_metrics=("mrr@10",))
    exact = retrieval_recall(items, texts, owner, ks=(1, 5, 10), rank_metrics=("mrr@10",))
    assert got["t2i_mrr@10"] == exact["t2i_mrr@10"] and got["i2t_mrr@10"] == exact["i2t_mrr@10"]
    for metric in ("mdr", "mnr", "mrr@20"):
        with pytest.raises(ValueError, match=f"rank metric '{metric}' needs ranks beyond max"):
            retrieval_recall(items, texts, owner, precision="fp16", rank_metrics=(metric,))


@pytest.mark.parametrize("name", ["map@0", "mrr@0", "mrr", "MdR", "mrr@-1", "ndcg", "recall@5"])
def test_unknown_names_are_refused_naming_the_known_ones(name):
    with pytest.raises(ValueError, match="known: mdr, mnr, mrr@K, map@K, ndcg@K"):
        rank_metrics(torch.tensor([0, 1]), [name])
    items, texts, owner = world(0)
    with pytest.raises(ValueError, match="unknown rank metric"):
        retrieval_recall(items, texts, owner, rank_metrics=(name,))


def test_graded_metrics_need_every_positives_rank_not_the_best():
    with pytest.raises(ValueError, match="graded over every positive"):
        rank_metrics(torch.tensor([0, 1]), ["map@10"])


def test_ranks_must_be_non_negative_integers():
    for bad in (torch.tensor([0.0, 1.0]), torch.tensor([-1, 2]), torch.tensor([], dtype=torch.long)):
        with pytest.raises(ValueError):
            rank_metrics(bad, ["mnr"])
