"""mAP@k and nDCG@k graded over every positive, both directions: the rank of every positive pair
from the engine (grouped pass, row-wise pass, re-ranking) equals a full-matrix reference written
here (ties and several texts per item included), and the metrics equal the reference formulas,
torchmetrics' RetrievalMAP / RetrievalNormalizedDCG and MTEB's (pytrec_eval's) map_at_k / ndcg_at_k."""

from __future__ import annotations

import math

import pytest
import torch

from _reference import gallery_order, near_tie_problem, random_problem, score_matrix, torch_threads
from vlr_plugins.eval import graded_rank_metrics, retrieval_recall
from vlr_plugins.eval._tile_workers import MIN_WORKER_TILE_ELEMS
from vlr_plugins.eval._tiles import ScoreMatrix
from vlr_plugins.eval.grouped_ranks import diagonal_blocks, worker_budget

GRADED = ("map@1", "map@5", "map@10", "ndcg@1", "ndcg@5", "ndcg@10")
CPU = torch.device("cpu")


def reference_lists(items, texts, owner, rerank_order=None, k=0):
    """Every query's gallery best first (ties by lower index) and its set of positives, both
    directions; ``rerank_order`` re-orders a query's top k."""
    scores, owner = score_matrix(items, texts), owner.tolist()
    def ordered(row):
        order = gallery_order(row)
        return rerank_order(order[:k]) + order[k:] if rerank_order is not None else order
    i2t = [(ordered(scores[i]), {j for j, o in enumerate(owner) if o == i}) for i in range(len(items))]
    t2i = [(ordered(scores[:, j]), {owner[j]}) for j in range(len(texts))]
    return i2t, t2i


def reference_metric(lists, name: str) -> float:
    """trec_eval's map_cut_k (divided by the positives) and ndcg_cut_k with 0/1 gains."""
    kind, k = name.split("@")
    k, total = int(k), 0.0
    for order, positives in lists:
        hits = [rank for rank, g in enumerate(order[:k]) if g in positives]
        if kind == "map":
            total += sum((m + 1) / (rank + 1) for m, rank in enumerate(hits)) / len(positives)
        else:
            ideal = sum(1 / math.log2(i + 2) for i in range(min(len(positives), k)))
            total += sum(1 / math.log2(rank + 2) for rank in hits) / ideal
    return total / len(lists)


def reference_pair_ranks(lists_i2t, owner):
    place = [{g: rank for rank, g in enumerate(order)} for order, _ in lists_i2t]
    return [place[int(o)][j] for j, o in enumerate(owner)]


def grouped(problem):
    items, texts, owner = problem
    order = torch.argsort(owner, stable=True)
    return items, texts[order], owner[order]


def tie_problem(seed=0, n=23, per=3):
    """+-1 vectors in 4 dims: cosines are multiples of 0.25, most pairs tie; exact duplicates."""
    g = torch.Generator().manual_seed(seed)
    owner = torch.arange(n).repeat_interleave(per)[torch.randperm(n * per, generator=g)]
    items = torch.randint(0, 2, (n, 4), generator=g).float() * 2 - 1
    texts = torch.randint(0, 2, (n * per, 4), generator=g).float() * 2 - 1
    texts[5], items[7] = texts[4], items[3]
    return items, texts, owner


PROBLEMS = {"random": random_problem, "near-ties": near_tie_problem, "ties": tie_problem}


def check(got, items, texts, owner, **reference_options):
    i2t, t2i = reference_lists(items, texts, owner, **reference_options)
    assert got["i2t_pair_ranks"].tolist() == reference_pair_ranks(i2t, owner)
    for name in GRADED:
        assert got[f"i2t_{name}"] == pytest.approx(reference_metric(i2t, name), rel=1e-12, abs=1e-15), name
        assert got[f"t2i_{name}"] == pytest.approx(reference_metric(t2i, name), rel=1e-12, abs=1e-15), name


@pytest.mark.parametrize("problem", PROBLEMS, ids=list(PROBLEMS))
@pytest.mark.parametrize("order", ["grouped", "interleaved"])
@pytest.mark.parametrize("chunk_size, max_chunk_bytes", [(None, 256 * 2**20), (4, 4096), (1, 800), (None, 200)])
def test_every_positive_pair_and_metric_equal_the_full_matrix_reference(problem, order, chunk_size,
                                                                        max_chunk_bytes):
    items, texts, owner = PROBLEMS[problem]()
    if order == "grouped":
        items, texts, owner = grouped((items, texts, owner))
    got = retrieval_recall(items, texts, owner, rank_metrics=GRADED + ("mrr@10",), return_ranks=True,
                           chunk_size=chunk_size, max_chunk_bytes=max_chunk_bytes)
    check(got, items, texts, owner)
    # the best text is the best-ranked positive pair, and the recall part is unchanged
    least = [min(r for r, o in zip(got["i2t_pair_ranks"].tolist(), owner.tolist()) if o == i) for i in range(len(items))]
    assert got["i2t_ranks"].tolist() == least
    plain = retrieval_recall(items, texts, owner, return_ranks=True, chunk_size=chunk_size,
                             max_chunk_bytes=max_chunk_bytes)
    assert {k: v for k, v in got.items() if k in plain and not k.endswith("ranks")} == \
        {k: v for k, v in plain.items() if not k.endswith("ranks")}
    assert got["i2t_ranks"].tolist() == plain["i2t_ranks"].tolist()


@pytest.mark.parametrize("problem", PROBLEMS, ids=list(PROBLEMS))
@pytest.mark.parametrize("threads", [2, 3])
def test_tiles_shared_among_workers_count_every_pair(cpu_blas, problem, threads):
    items, texts, owner = grouped(random_problem(n_items=150, seed=7) if problem == "random" else PROBLEMS[problem]())
    with torch_threads(threads):
        budget = 8 * threads * MIN_WORKER_TILE_ELEMS
        matrix = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=budget, chunk_size=5)
        assert worker_budget(matrix)[0] == threads and len(diagonal_blocks(matrix)) - 1 > threads
        got = retrieval_recall(items, texts, owner, rank_metrics=GRADED, return_ranks=True, chunk_size=5,
                               max_chunk_bytes=budget)
    check(got, items, texts, owner)


def test_reranking_moves_the_pairs_it_reorders():
    items, texts, owner = grouped(random_problem(n_items=40, seed=3))
    k = 6
    def rerank(queries, candidates, direction):  # favours the higher gallery index
        return candidates.float()
    got = retrieval_recall(items, texts, owner, rank_metrics=GRADED, return_ranks=True, rerank=rerank, rerank_k=k,
                           rerank_batch=7)
    check(got, items, texts, owner, rerank_order=lambda top: sorted(top, reverse=True), k=k)


def test_graded_metrics_of_a_small_example():
    # one query with positives at ranks 0 and 2, another with one at rank 11
    got = graded_rank_metrics(torch.tensor([2, 0, 11]), torch.tensor([0, 0, 1]), 2, ["map@10", "ndcg@10", "map@12"])
    assert got["map@10"] == pytest.approx((1 + 2 / 3) / 2 / 2)
    assert got["ndcg@10"] == pytest.approx((1 + 1 / 2) / (1 + 1 / math.log2(3)) / 2)
    assert got["map@12"] == pytest.approx(((1 + 2 / 3) / 2 + 1 / 12) / 2)


def test_graded_metrics_refuse_what_they_cannot_grade():
    with pytest.raises(ValueError, match="no positive"):
        graded_rank_metrics(torch.tensor([0]), torch.tensor([0]), 2, ["map@10"])
    with pytest.raises(ValueError, match="same rank"):
        graded_rank_metrics(torch.tensor([1, 1]), torch.tensor([0, 0]), 1, ["map@10"])
    with pytest.raises(ValueError, match="not graded"):
        graded_rank_metrics(torch.tensor([1]), torch.tensor([0]), 1, ["mrr@10"])
    with pytest.raises(ValueError, match="unknown rank metric"):
        graded_rank_metrics(torch.tensor([1]), torch.tensor([0]), 1, ["map@0"])


def test_reduced_precision_refuses_graded_metrics():
    items, texts, owner = random_problem()
    for name in ("map@5", "ndcg@1"):
        with pytest.raises(ValueError, match="needs the rank of every positive"):
            retrieval_recall(items, texts, owner, precision="bf16", rank_metrics=(name,))


def _flat(scores: torch.Tensor, owner: torch.Tensor):
    """torchmetrics' flat inputs, both directions; scores shifted to be positive (torchmetrics
    drops the targets of non-positive predictions)."""
    n, m = scores.shape
    i2t = (scores.flatten() + 2, (owner[None, :] == torch.arange(n)[:, None]).flatten(),
           torch.arange(n).repeat_interleave(m))
    t2i = (scores.T.flatten() + 2, (torch.arange(n)[None, :] == owner[:, None]).flatten(),
           torch.arange(m).repeat_interleave(n))
    return {"i2t": i2t, "t2i": t2i}


def test_equal_to_torchmetrics_retrieval_map_and_ndcg():
    tm = pytest.importorskip("torchmetrics.retrieval")
    items, texts, owner = random_problem(n_items=30, seed=4)
    n, m = len(items), len(texts)
    got = retrieval_recall(items, texts, owner, rank_metrics=("ndcg@1", "ndcg@5", "ndcg@10", f"map@{m}", f"map@{n}"))
    flat = _flat(score_matrix(items, texts).float(), owner)
    for direction, (preds, target, index) in flat.items():
        for k in (1, 5, 10):
            want = tm.RetrievalNormalizedDCG(top_k=k)(preds, target, indexes=index)
            assert got[f"{direction}_ndcg@{k}"] == pytest.approx(float(want), abs=1e-6), (direction, k)
        # torchmetrics' RetrievalMAP(top_k) divides by the positives found in the top k: the same
        # quantity as trec_eval's only without a cut-off (k = the gallery)
        gallery = m if direction == "i2t" else n
        want = tm.RetrievalMAP()(preds, target, indexes=index)
        assert got[f"{direction}_map@{gallery}"] == pytest.approx(float(want), abs=1e-6), direction


def test_equal_to_mteb_map_and_ndcg_at_k():
    metrics = pytest.importorskip("mteb._evaluators.retrieval_metrics")
    items, texts, owner = random_problem(n_items=30, seed=5)
    got = retrieval_recall(items, texts, owner, rank_metrics=("map@1", "map@5", "map@10", "ndcg@1", "ndcg@5",
                                                              "ndcg@10"))
    scores = score_matrix(items, texts)
    runs = {"i2t": (scores, lambda q, g: int(owner[g]) == q), "t2i": (scores.T, lambda q, g: int(owner[q]) == g)}
    for direction, (matrix, relevant) in runs.items():
        results = {f"q{q}": {f"d{g}": float(matrix[q, g]) for g in range(matrix.shape[1])} for q in range(len(matrix))}
        qrels = {f"q{q}": {f"d{g}": 1 for g in range(matrix.shape[1]) if relevant(q, g)} for q in range(len(matrix))}
        mteb = metrics.calculate_retrieval_scores(results, qrels, [1, 5, 10])
        for k in (1, 5, 10):
            assert got[f"{direction}_map@{k}"] == pytest.approx(mteb.map[f"MAP@{k}"], abs=1e-5), (direction, k)
            assert got[f"{direction}_ndcg@{k}"] == pytest.approx(mteb.ndcg[f"NDCG@{k}"], abs=1e-5), (direction, k)
