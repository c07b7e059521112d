"""`retrieval_recall(..., ks=())`: rank metrics alone, no recall@k computed or reported (what
`vlr eval --metrics mdr,mnr` asks the engine), each equal to a full-matrix reference written here,
on every path of the engine (grouped pass, row-wise pass, re-ranking, re-normalisation); with
neither recall nor rank metrics the call is refused."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from _reference import gallery_order, random_problem, score_matrix
from vlr_plugins.eval import DualSoftmax, retrieval_recall

NAMES = ("mdr", "mnr", "mrr@5", "map@5", "ndcg@10")


def reference(items, texts, owner, names=NAMES):
    """Every metric from the float64 cosine matrix, each query's gallery sorted by (-score, index)."""
    scores, owner = score_matrix(items, texts), owner.tolist()
    lists = {"i2t": [(gallery_order(scores[i]), {j for j, o in enumerate(owner) if o == i})
                     for i in range(len(items))],
             "t2i": [(gallery_order(scores[:, j]), {owner[j]}) for j in range(len(texts))]}
    out = {}
    for d, queries in lists.items():
        hits = [[rank for rank, g in enumerate(order) if g in positives] for order, positives in queries]
        best = [h[0] + 1 for h in hits]  # 1-based
        for name in names:
            kind, _, k = name.partition("@")
            k = int(k) if k else None
            if kind == "mdr":
                value = float(statistics.median(best))
            elif kind == "mnr":
                value = sum(best) / len(best)
            elif kind == "mrr":
                value = sum(1 / r for r in best if r <= k) / len(best)
            elif kind == "map":
                value = sum(sum((m + 1) / (r + 1) for m, r in enumerate(x for x in h if x < k)) / len(h)
                            for h in hits) / len(hits)
            else:  # ndcg with 0/1 gains
                value = sum(sum(1 / math.log2(r + 2) for r in h if r < k)
                            / sum(1 / math.log2(i + 2) for i in range(min(len(h), k))) for h in hits) / len(hits)
            out[f"{d}_{name}"] = value
    return out


def problem(grouped: bool, seed: int = 0):
    items, texts, owner = random_problem(n_items=17, dim=6, seed=seed, noise=1.5)
    texts[4] = texts[9]  # exact ties
    if grouped:  # the texts listed by item, as a benchmark file lists them: the grouped pass
        order = torch.argsort(owner, stable=True)
        texts, owner = texts[order], owner[order]
    return items, texts, owner


def identity_rerank(items, texts):
    """Re-scores candidates by their float64 cosine: the first stage's order, through the re-ranking path."""
    scores = score_matrix(items, texts)
    return lambda q, c, d: (scores[q[:, None], c] if d == "i2t" else scores.T[q[:, None], c]).float()


@pytest.mark.parametrize("path", ["grouped", "row-wise", "rerank"])
@pytest.mark.parametrize("chunk_size", [None, 3])
def test_rank_metrics_alone_equal_the_full_matrix_reference(path, chunk_size):
    items, texts, owner = problem(grouped=path == "grouped")
    rerank = identity_rerank(items, texts) if path == "rerank" else None
    got = retrieval_recall(items, texts, owner, ks=(), rank_metrics=NAMES, chunk_size=chunk_size, rerank=rerank,
                           rerank_k=len(texts))
    want = reference(items, texts, owner)
    assert sorted(got) == sorted(want)  # no i2t_r*, *_mean, r_mean
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("grouped", [True, False])
def test_with_renorm_the_rank_metrics_are_those_of_a_run_with_recall(grouped):
    items, texts, owner = problem(grouped, seed=1)
    alone = retrieval_recall(items, texts, owner, ks=(), rank_metrics=NAMES, renorm=DualSoftmax(30.0),
                             return_ranks=True)
    both = retrieval_recall(items, texts, owner, ks=(1, 5), rank_metrics=NAMES, renorm=DualSoftmax(30.0),
                            return_ranks=True)
    assert sorted(alone) == sorted(k for k in both if not k.endswith(("_r1", "_r5", "_mean")))
    for key, value in alone.items():
        assert value == both[key] if not torch.is_tensor(value) else torch.equal(value, both[key])
    # and the ranks themselves are the re-normalised order's: recall from them is the run's recall
    assert 100.0 * float((alone["t2i_ranks"] < 5).double().mean()) == pytest.approx(both["t2i_r5"], rel=1e-12)


def test_nothing_to_compute_is_refused():
    items, texts, owner = problem(grouped=True)
    for precision in ("fp32", "fp16"):
        with pytest.raises(ValueError, match="nothing to compute: ks .* and rank_metrics are both empty"):
            retrieval_recall(items, texts, owner, ks=(), precision=precision)


def test_reduced_precision_without_a_recall_k_refuses_every_rank_metric():
    items, texts, owner = problem(grouped=True)
    with pytest.raises(ValueError, match=r"'mrr@5' needs ranks beyond any recall k \(ks is empty\)"):
        retrieval_recall(items, texts, owner, ks=(), rank_metrics=("mrr@5",), precision="fp16")
    got = retrieval_recall(items, texts, owner, ks=(5,), rank_metrics=("mrr@5",), precision="fp16")
    assert got["t2i_mrr@5"] == pytest.approx(reference(items, texts, owner, ("mrr@5",))["t2i_mrr@5"], rel=1e-12)
