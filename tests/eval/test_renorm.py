"""Re-normalisation in the engine (retrieval_recall(renorm=...)): dual softmax and QB-Norm give, in
both directions, the ranks, recalls, MdR and mAP of a full-matrix float64 reference written here
from the papers' code (``sims * softmax(sims * temp, dim=0)``; ioanacroi/qb-norm's ``qb_norm``),
ranked by (-score, index): tie-free data and exact duplicates, texts grouped and interleaved, tiny
tiles, 2 workers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from _reference import random_problem, score_matrix, torch_threads
from vlr_plugins.eval import retrieval_recall
from vlr_plugins.eval._tile_workers import MIN_WORKER_TILE_ELEMS
from vlr_plugins.eval._tiles import ScoreMatrix
from vlr_plugins.eval.grouped_ranks import diagonal_blocks, worker_budget
from vlr_plugins.eval.renorm import DualSoftmax, QueryBankNorm, renorm_keys

CPU = torch.device("cpu")
KS = (1, 5, 10)
METRICS = ("mdr", "mnr", "map@10", "map@5")


# ---------------------------------------------------------------- references (float64 numpy)

def softmax0(x):
    x = x - x.max(axis=0, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=0, keepdims=True)


def dsl_reference(S, temperature):
    """(N, M) scores -> (i2t (N items x M texts), t2i (M texts x N items)) transformed scores, as
    the papers' inference code: ``sims * softmax(sims * temp, dim=0)`` on the (query x gallery) matrix."""
    t2i = S.T * softmax0(S.T * temperature)
    i2t = S * softmax0(S * temperature)
    return i2t, t2i


def qb_norm_reference(train_test, test_test, k, beta):
    """ioanacroi/qb-norm dynamic_inverted_softmax.py ``qb_norm`` (with its helpers), written out:
    the bank's top-k gallery entries, then each test query whose top-1 is among them divided by
    the bank's sum of exp(beta s). Sorts are stable: ties by lower index, the engine's rule (the
    original's default quicksort leaves tie order unspecified)."""
    retrieved = np.unique(np.argsort(-train_test, axis=1, kind="stable")[:, :k].reshape(-1))
    normalized = test_test.copy()
    train_exp, test_exp = np.exp(train_test * beta), np.exp(test_test * beta)
    normalizing_sum = np.sum(train_exp, axis=0)
    top1 = np.argsort(-test_exp, axis=1, kind="stable")[:, 0]
    index = np.nonzero(np.isin(top1, retrieved))
    normalized[index, :] = np.divide(test_exp[index, :], normalizing_sum)
    return normalized


def ranks_by(T, positive):
    """Each query's (row's) ranks of every gallery entry, best first by (-score, index): (Q, G) place."""
    order = np.lexsort((np.broadcast_to(np.arange(T.shape[1]), T.shape), -T), axis=1)
    place = np.empty_like(order)
    np.put_along_axis(place, order, np.arange(T.shape[1])[None, :].repeat(len(T), 0), axis=1)
    return place


def reference_result(i2t_T, t2i_T, owner):
    """Best-positive ranks, every pair's image-to-text rank, recalls, MdR, MnR, mAP@k."""
    n, m = i2t_T.shape
    owner = owner.numpy()
    i2t_place, t2i_place = ranks_by(i2t_T, None), ranks_by(t2i_T, None)
    pair = i2t_place[owner, np.arange(m)]
    i2t = np.array([pair[owner == i].min() for i in range(n)])
    t2i = t2i_place[np.arange(m), owner]
    out = {"i2t_ranks": i2t.tolist(), "t2i_ranks": t2i.tolist(), "i2t_pair_ranks": pair.tolist()}
    for name, ranks in (("i2t", i2t), ("t2i", t2i)):
        for k in KS:
            out[f"{name}_r{k}"] = 100.0 * (ranks < k).sum() / len(ranks)
        out[f"{name}_mdr"], out[f"{name}_mnr"] = float(np.median(ranks)) + 1, float(ranks.mean()) + 1
    for k in (5, 10):
        ap = [sum((c + 1) / (r + 1) for c, r in enumerate(sorted(pair[owner == i])) if r < k) / (owner == i).sum()
              for i in range(n)]
        out[f"i2t_map@{k}"] = float(np.mean(ap))
        out[f"t2i_map@{k}"] = float(np.mean([1 / (r + 1) if r < k else 0.0 for r in t2i]))
    return out


def check(got, want):
    for key, value in want.items():
        if key.endswith("ranks"):
            assert got[key].tolist() == value, key
        else:
            assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key


# ---------------------------------------------------------------- problems

def duplicates_problem(seed=0, n=24, per=3, dim=16):
    """Random vectors with exact duplicate items and texts (within and across owners): each
    duplicate's scores are the bits of its original, so the duplicates, and only they, tie.
    (Quantised scores, e.g. +-1 vectors, would also give near-ties ~1e-11 apart once
    transformed, which no float32 computation orders.)"""
    g = torch.Generator().manual_seed(seed)
    owner = torch.arange(n).repeat_interleave(per)[torch.randperm(n * per, generator=g)]
    items = torch.randn(n, dim, generator=g)
    texts = items[owner] + 2.5 * torch.randn(n * per, dim, generator=g)
    items[7], items[15] = items[3], items[3]
    texts[5], texts[40], texts[41] = texts[4], texts[4], texts[6]
    return items, texts, owner


def tie_free_problem(seed=0):
    return random_problem(n_items=40, dim=16, seed=seed, noise=3.0)  # some positive pairs score < 0


PROBLEMS = {"tie-free": tie_free_problem, "duplicates": duplicates_problem}


def grouped(problem):
    items, texts, owner = problem
    order = torch.argsort(owner, stable=True)
    return items, texts[order], owner[order]


def arranged(problem, order):
    items, texts, owner = PROBLEMS[problem]()
    return grouped((items, texts, owner)) if order == "grouped" else (items, texts, owner)


def banks(problem, dim=16, seed=1):
    g = torch.Generator().manual_seed(seed)
    text_bank, item_bank = torch.randn(50, dim, generator=g), torch.randn(30, dim, generator=g)
    if problem == "duplicates":  # a bank query twice, and one equal to a test text
        text_bank[9], text_bank[11] = text_bank[2], duplicates_problem()[1][4]
    return text_bank, item_bank


def unit(x):
    x = x.double()
    return x / x.norm(dim=1, keepdim=True)


TILES = [(None, 256 * 2**20), (4, 4096), (1, 900), (None, 300)]


# ---------------------------------------------------------------- tests

@pytest.mark.parametrize("problem", PROBLEMS)
@pytest.mark.parametrize("order", ["grouped", "interleaved"])
@pytest.mark.parametrize("chunk_size, max_chunk_bytes", TILES)
def test_dual_softmax_equals_the_full_matrix_reference(cpu_blas, problem, order, chunk_size, max_chunk_bytes):
    items, texts, owner = arranged(problem, order)
    S = score_matrix(items, texts)
    for temperature in (100.0, 7.5, 300.0):
        got = retrieval_recall(items, texts, owner, renorm=DualSoftmax(temperature), rank_metrics=METRICS,
                               return_ranks=True, chunk_size=chunk_size, max_chunk_bytes=max_chunk_bytes)
        want = reference_result(*dsl_reference(S.numpy(), temperature), owner)
        check(got, want)
        assert got["renorm"] == {"method": "dsl", "temperature": temperature}
    # both paths are reached: positive pairs scoring < 0 stay in the tiles (negative keys); at
    # tau = 300 some positive's transformed score is below 2^-100, ranked from float64 rows
    assert (S[owner, torch.arange(len(owner))] < 0).any()
    i2t, t2i = dsl_reference(S.numpy(), 300.0)
    assert (abs(t2i[torch.arange(len(owner)), owner]) < 2.0 ** -100).any()
    # and both kinds of keys: factored (one exponential for both directions) at tau 7.5 and
    # 100, the statistics too far apart for one shared constant at tau 300
    matrix = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=max_chunk_bytes, chunk_size=chunk_size)
    factored = {t: renorm_keys(DualSoftmax(t), matrix).shift is not None for t in (7.5, 100.0, 300.0)}
    assert factored == {7.5: True, 100.0: True, 300.0: False}


def test_dual_softmax_ties_between_duplicates_anywhere_in_a_tile(cpu_blas):
    """Texts drawn from a small pool (exact duplicates in every column position, rows of many
    vectors and a scalar rest): equal scores must get equal keys, so ties follow the lower index
    as in the reference (renorm_keys.uniform_)."""
    g = torch.Generator().manual_seed(3)
    items = torch.randn(24, 16, generator=g)
    pool = torch.randn(40, 16, generator=g)
    owner = torch.arange(24).repeat_interleave(9)
    texts = pool[torch.randint(0, 40, (len(owner),), generator=g)] + 0.0 * items[owner]
    texts[::7] = items[owner[::7]]  # some texts equal to their item
    S = score_matrix(items, texts)
    for chunk_size, max_chunk_bytes in ((None, 256 * 2**20), (6, 256 * 2**20)):
        got = retrieval_recall(items, texts, owner, renorm=DualSoftmax(30.0), rank_metrics=METRICS,
                               return_ranks=True, chunk_size=chunk_size, max_chunk_bytes=max_chunk_bytes)
        check(got, reference_result(*dsl_reference(S.numpy(), 30.0), owner))


def qb_reference(items, texts, owner, text_bank, item_bank, k, beta):
    S = score_matrix(items, texts).numpy()
    t2i, i2t = S.T.copy(), S.copy()
    if text_bank is not None:  # text queries: bank captions x gallery items
        t2i = qb_norm_reference((unit(text_bank) @ unit(items).T).numpy(), t2i, k, beta)
    if item_bank is not None:
        i2t = qb_norm_reference((unit(item_bank) @ unit(texts).T).numpy(), i2t, k, beta)
    return reference_result(i2t, t2i, owner)


@pytest.mark.parametrize("problem", PROBLEMS)
@pytest.mark.parametrize("order", ["grouped", "interleaved"])
@pytest.mark.parametrize("chunk_size, max_chunk_bytes", TILES)
def test_qb_norm_equals_the_official_code_on_full_matrices(cpu_blas, problem, order, chunk_size, max_chunk_bytes):
    items, texts, owner = arranged(problem, order)
    text_bank, item_bank = banks(problem)
    for which, k, beta in (((text_bank, item_bank), 1, 20.0), ((text_bank, None), 3, 20.0),
                           ((None, item_bank), 2, 5.0)):
        renorm = QueryBankNorm(text_bank=which[0], item_bank=which[1], beta=beta, k=k)
        got = retrieval_recall(items, texts, owner, renorm=renorm, rank_metrics=METRICS, return_ranks=True,
                               chunk_size=chunk_size, max_chunk_bytes=max_chunk_bytes)
        check(got, qb_reference(items, texts, owner, *which, k, beta))
        assert got["renorm"] == {"method": "qbnorm", "beta": beta, "k": k,
                                 "text_bank": None if which[0] is None else 50,
                                 "item_bank": None if which[1] is None else 30}


@pytest.mark.parametrize("problem", PROBLEMS)
def test_tiles_shared_among_two_workers(cpu_blas, problem):
    items, texts, owner = grouped(random_problem(n_items=150, dim=16, seed=7) if problem == "tie-free"
                                  else duplicates_problem(n=150))
    text_bank, item_bank = banks(problem)
    with torch_threads(2):
        budget = 8 * 2 * MIN_WORKER_TILE_ELEMS
        matrix = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=budget, chunk_size=5)
        assert worker_budget(matrix, 3)[0] == 2 and len(diagonal_blocks(matrix, 3)) - 1 > 2
        runs = [(DualSoftmax(), reference_result(*dsl_reference(score_matrix(items, texts).numpy(), 100.0), owner)),
                (QueryBankNorm(text_bank=text_bank, item_bank=item_bank),
                 qb_reference(items, texts, owner, text_bank, item_bank, 1, 20.0)),
                (QueryBankNorm(text_bank=text_bank, item_bank=item_bank, k=3),  # top 3s merged across workers
                 qb_reference(items, texts, owner, text_bank, item_bank, 3, 20.0))]
        for renorm, want in runs:
            got = retrieval_recall(items, texts, owner, renorm=renorm, rank_metrics=METRICS, return_ranks=True,
                                   chunk_size=5, max_chunk_bytes=budget)
            check(got, want)


def test_the_transform_changes_ranks_and_none_changes_nothing():
    items, texts, owner = grouped(tie_free_problem())
    plain = retrieval_recall(items, texts, owner, return_ranks=True)
    assert "renorm" not in plain
    assert retrieval_recall(items, texts, owner, return_ranks=True, renorm=None).keys() == plain.keys()
    dsl = retrieval_recall(items, texts, owner, return_ranks=True, renorm=DualSoftmax())
    assert dsl["t2i_ranks"].tolist() != plain["t2i_ranks"].tolist()


def test_refusals():
    items, texts, owner = tie_free_problem()
    with pytest.raises(ValueError, match="dimension 8, the embeddings 16"):
        retrieval_recall(items, texts, owner, renorm=QueryBankNorm(item_bank=torch.randn(5, 8)))
    with pytest.raises(ValueError, match="rerank"):
        retrieval_recall(items, texts, owner, renorm=DualSoftmax(),
                         rerank=lambda q, c, d: torch.zeros(c.shape))
    with pytest.raises(ValueError, match="precision='fp32'"):
        retrieval_recall(items, texts, owner, renorm=DualSoftmax(), precision="bf16")
    with pytest.raises(ValueError, match="text_bank"):
        QueryBankNorm()
    with pytest.raises(ValueError, match="temperature"):
        DualSoftmax(0)
    with pytest.raises(ValueError, match="k must be"):
        QueryBankNorm(text_bank=torch.randn(3, 4), k=0)


def nearly_all_active_problem(seed=3, n=128, per=3, dim=16):
    """Banks as QB-Norm's usual ones: many noisy copies of the gallery (every entry but a few is
    some bank query's top-1), texts near their items, a duplicate item and text (ties: the bank's
    copies of them name the lower index, so the other is inactive), and queries next to an
    inactive entry that is not theirs (their raw top-1 is inactive: not normalised)."""
    g = torch.Generator().manual_seed(seed)
    items = torch.randn(n, dim, generator=g)
    items[30] = items[29]
    owner = torch.arange(n).repeat_interleave(per)
    texts = items[owner] + 0.4 * torch.randn(n * per, dim, generator=g)
    texts[11] = texts[10]
    kept = torch.tensor([i for i in range(n) if i not in (5, 17)])
    text_bank = items[kept].repeat(4, 1) + 0.05 * torch.randn(4 * len(kept), dim, generator=g)
    kept = torch.tensor([t for t in range(n * per) if t not in (7, 100, 150)])
    item_bank = texts[kept].repeat(2, 1) + 0.02 * torch.randn(2 * len(kept), dim, generator=g)
    texts[0], texts[4] = items[5] + 0.01 * torch.randn(dim, generator=g), items[17]  # owned by items 0, 1
    items[9] = texts[100] + 0.01 * torch.randn(dim, generator=g)  # text 100 is item 33's
    return (items, texts, owner), text_bank, item_bank


def test_qb_norm_queries_resolved_before_the_rank_pass(monkeypatch):
    """Where the banks leave few gallery entries inactive (training captions against a test
    gallery), each query's case is known before the rank pass (a query's top-1 scores at least its
    positive, so an inactive entry below that cannot be it; the others' rows are read): the grouped
    pass then counts each query under its own key alone, with the official code's ranks."""
    from vlr_plugins.eval import renorm_pass
    from vlr_plugins.eval.renorm_keys import QueryBankChoice, QueryBankKeys

    monkeypatch.setenv("VLR_COUNT_KERNEL", "torch")
    problem, text_bank, item_bank = nearly_all_active_problem()
    items, texts, owner = problem
    S = score_matrix(items, texts)
    matrix = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=4096, chunk_size=4)
    for which in ((text_bank, None), (None, item_bank), (text_bank, item_bank)):
        renorm = QueryBankNorm(text_bank=which[0], item_bank=which[1])
        keys = renorm_keys(renorm, matrix, grouped=True)
        assert isinstance(keys, QueryBankKeys)
        for direction, bank, side, rows in (("t2i", which[0], keys.t2i, S.T), ("i2t", which[1], keys.i2t, S)):
            if bank is None:
                assert side is None
                continue
            top = (unit(bank) @ unit(items if direction == "t2i" else texts).T).argmax(1)
            active = torch.zeros(rows.shape[1], dtype=torch.bool)
            active[top] = True
            assert 0 < int((~active).sum()) <= len(active) // 16  # a few
            want = active[rows.argmax(1)]  # normalised: the raw top-1 active
            assert not bool(want.all())  # some queries' top-1 is inactive
            assert side[1] is None  # the tiles key every query as normalised, then
            assert torch.equal(keys.raw_queries[direction], (~want).nonzero().flatten())  # these by their rows
        want = qb_reference(items, texts, owner, *which, 1, 20.0)
        for chunk_size, max_chunk_bytes in TILES:
            got = retrieval_recall(items, texts, owner, renorm=renorm, rank_metrics=METRICS, return_ranks=True,
                                   chunk_size=chunk_size, max_chunk_bytes=max_chunk_bytes)
            check(got, want)
    # more inactive entries than RESOLVE_SHARE of the gallery: the pass finds the top-1s itself
    monkeypatch.setattr(renorm_pass, "RESOLVE_SHARE", 2 / 128)
    assert isinstance(renorm_keys(QueryBankNorm(text_bank=text_bank), matrix, grouped=True), QueryBankChoice)
    assert renorm_pass.normalised_queries(matrix, "t2i", torch.ones(len(items), dtype=torch.bool)).all()
