"""retrieval_recall as a streaming engine: tiles, reduced precision, re-ranking, memory.

Every result is checked against a naive reference written here: the full float64 score
matrix, each query's gallery sorted by (-score, index).
"""

from __future__ import annotations

import pytest
import torch

from vlr_plugins.eval import retrieval_recall
from vlr_plugins.eval._topk import Engine, lowp_error, tile_shape

KS = (1, 5, 10)
CPU = torch.device("cpu")


# ---------------------------------------------------------------- reference


def score_matrix(items, texts) -> torch.Tensor:
    items, texts = items.double(), texts.double()
    return (items / items.norm(dim=1, keepdim=True)) @ (texts / texts.norm(dim=1, keepdim=True)).T


def gallery_order(scores_row: torch.Tensor) -> list[int]:
    """Gallery indices best first; equal scores by lower index."""
    return sorted(range(len(scores_row)), key=lambda j: (-scores_row[j].item(), j))


def reference_ranks(items, texts, owner, rerank_order=None, k=0):
    """0-based rank of each item's best text and each text's owner. ``rerank_order(order[:k])``
    re-orders a query's top k; positives outside it keep their rank."""
    S, owner = score_matrix(items, texts), owner.tolist()

    def rank(order, is_pos):
        first = next(pos for pos, g in enumerate(order) if is_pos(g))
        if rerank_order is not None and first < k:
            return next(pos for pos, g in enumerate(rerank_order(order[:k])) if is_pos(g))
        return first

    i2t = [rank(gallery_order(S[i]), lambda j, i=i: owner[j] == i) for i in range(len(items))]
    t2i = [rank(gallery_order(S[:, j]), lambda i, j=j: i == owner[j]) for j in range(len(texts))]
    return i2t, t2i


# ---------------------------------------------------------------- data


def random_problem(n_items=60, dim=16, seed=0, noise=1.2):
    """1-4 texts per item, interleaved; texts near their item so recall is neither 0 nor 100."""
    g = torch.Generator().manual_seed(seed)
    owner = torch.cat([torch.arange(n_items), torch.randint(0, n_items, (2 * n_items,), generator=g)])
    owner = owner[torch.randperm(len(owner), generator=g)]
    items = torch.randn(n_items, dim, generator=g)
    return items, items[owner] + noise * torch.randn(len(owner), dim, generator=g), owner


def near_tie_problem(seed=0, n_items=24, n_texts=80, per_text=6):
    """Items are basis vectors, so a score is a coordinate of the (unit) text. A text has
    its owner and 5 other items at 1/4 + k 2^-13 (k distinct per item), a private coordinate
    making its norm 1, zeros elsewhere. So a query's candidates sit 1.2e-4 apart or more:
    below fp16/bf16 resolution, far above float32 rounding, so float32 orders them right."""
    g = torch.Generator().manual_seed(seed)
    owner = torch.cat([torch.arange(n_items), torch.randint(0, n_items, (n_texts - n_items,), generator=g)])
    texts = torch.zeros(n_texts, n_items + n_texts, dtype=torch.float64)
    for j in range(n_texts):
        others = [i for i in torch.randperm(n_items, generator=g).tolist() if i != owner[j]]
        texts[j, [int(owner[j])] + others[:per_text - 1]] = 1.0
    for i in range(n_items):  # distinct offsets among the texts holding item i
        holders = texts[:, i].nonzero().flatten()
        k = torch.randperm(80, generator=g)[:len(holders)] - 40
        texts[holders, i] = 0.25 + k.double() * 2**-13
    texts[torch.arange(n_texts), n_items + torch.arange(n_texts)] = (1 - (texts**2).sum(1)).sqrt()
    return torch.eye(n_items, n_items + n_texts), texts.float(), owner


def recalls(result: dict) -> dict:
    return {k: v for k, v in result.items() if not k.endswith("_ranks")}


# ---------------------------------------------------------------- tiles


@pytest.mark.parametrize("problem", [random_problem, near_tie_problem])
@pytest.mark.parametrize("chunk_size, max_chunk_bytes", [
    (None, 256 * 2**20),  # one tile
    (7, 4096),  # 7 items x 73 texts
    (1, 800),  # single rows
    (64, 2000),  # 64 items x 3 texts
    (None, 8),  # 1 x 1
])
def test_any_tiling_gives_the_reference_ranks(problem, chunk_size, max_chunk_bytes):
    items, texts, owner = problem()

    got = retrieval_recall(items, texts, owner, chunk_size=chunk_size,
                           max_chunk_bytes=max_chunk_bytes, return_ranks=True)

    i2t, t2i = reference_ranks(items, texts, owner)
    assert got["i2t_ranks"].tolist() == i2t
    assert got["t2i_ranks"].tolist() == t2i


def test_exact_ties_across_and_inside_tiles():
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


def test_a_failed_score_check_recomputes_the_query(monkeypatch):
    # if a positive's score seen inside its tile differs from the one used as threshold
    # (a BLAS giving other bits for another shape), that query is recomputed whole
    items, texts, owner = random_problem(seed=3)
    expected = retrieval_recall(items, texts, owner, chunk_size=8, return_ranks=True)
    real = Engine.positive_scores
    recomputed = []

    def off_by_one_ulp(self):
        s, ties = real(self)
        s[::7] = torch.nextafter(s[::7], torch.tensor(2.0))
        return s, ties

    def spy(self, direction, q, *args):
        recomputed.append((direction, len(q)))
        return real_rows(self, direction, q, *args)

    real_rows = Engine.row_ranks
    monkeypatch.setattr(Engine, "positive_scores", off_by_one_ulp)
    monkeypatch.setattr(Engine, "row_ranks", spy)

    got = retrieval_recall(items, texts, owner, chunk_size=8, return_ranks=True)

    assert {d for d, _ in recomputed} == {"i2t", "t2i"}
    assert dict(recomputed)["t2i"] == len(range(0, len(texts), 7))
    assert got["i2t_ranks"].tolist() == expected["i2t_ranks"].tolist()
    assert got["t2i_ranks"].tolist() == expected["t2i_ranks"].tolist()


def test_tile_shape_respects_the_memory_budget():
    coco_train = (118_287, 591_753)
    # CPU, 2 threads: a cache-sized tile (~512 x 4096, evened out over 232 x 144 tiles);
    # its score buffer and work buffer take 16 MiB, 8 MiB per thread
    rows, cols = tile_shape(*coco_train, max_chunk_bytes=256 * 2**20, device=CPU, threads=2)
    assert (rows, cols) == (510, 4110) and rows * cols * 8 <= 16 * 2**20
    rows, cols = tile_shape(*coco_train, max_chunk_bytes=256 * 2**20, device=CPU, threads=8)
    assert rows * cols * 8 <= 64 * 2**20 and rows * cols > 7 * 2**20
    # an accelerator gets the whole budget: ~2048 x 16384 float32 scores and work, 256 MiB
    cuda = torch.device("cuda")
    rows, cols = tile_shape(*coco_train, max_chunk_bytes=256 * 2**20, device=cuda)
    assert (rows, cols) == (2040, 16438) and rows * cols * 8 <= 256 * 2**20
    for budget in (64, 4096, 2**20, 2**28, 2**30):
        for n, m in ((10, 50), (1000, 5000), coco_train, (10**7, 5 * 10**7)):
            for device in (CPU, cuda):
                rows, cols = tile_shape(n, m, max_chunk_bytes=budget, device=device)
                assert 1 <= rows <= n and 1 <= cols <= m
                assert rows * cols * 8 <= budget
    assert tile_shape(40, 100, max_chunk_bytes=2**20, device=CPU, chunk_size=7, threads=2) == (7, 100)


# ---------------------------------------------------------------- reduced precision


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("seed", [0, 1])
def test_reduced_precision_gives_the_fp32_recall_on_random_data(precision, seed):
    items, texts, owner = random_problem(n_items=200, dim=64, seed=seed, noise=1.0)
    exact = retrieval_recall(items, texts, owner, ks=KS, return_ranks=True)

    got = retrieval_recall(items, texts, owner, ks=KS, precision=precision, return_ranks=True)

    assert recalls(got) == recalls(exact)
    for key in ("i2t_ranks", "t2i_ranks"):
        fast, slow = got[key], exact[key]
        below = slow < max(KS)
        assert torch.equal(fast[below], slow[below])  # exact below max(ks)
        assert (fast[~below] >= max(KS)).all() and (fast[~below] <= slow[~below]).all()  # bounds


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_reduced_precision_settles_near_ties_in_fp32(precision):
    items, texts, owner = near_tie_problem()
    i2t, t2i = reference_ranks(items, texts, owner)
    # the half-precision scores alone get these ranks wrong...
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    S = score_matrix(items, texts).to(dtype).float()
    naive_t2i = (S > S[owner, torch.arange(len(owner))]).sum(0)
    assert (naive_t2i != torch.tensor(t2i)).any()

    got = retrieval_recall(items, texts, owner, ks=KS, precision=precision, return_ranks=True)

    # ...but the reported ranks below max(ks), hence recall@k, are the fp32 ones
    for key, expected in (("i2t_ranks", i2t), ("t2i_ranks", t2i)):
        for r, e in zip(got[key].tolist(), expected):
            assert r == e if e < max(KS) else max(KS) <= r <= e
    assert recalls(got) == recalls(retrieval_recall(items, texts, owner, ks=KS))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dim", [4, 64, 256])
def test_the_half_precision_error_bound_holds(dtype, dim):
    # the worst case for rounding: all-positive vectors, scores near 1, long sums
    g = torch.Generator().manual_seed(dim)
    x = torch.rand(200, dim, generator=g) ** 4
    x = x / x.norm(dim=1, keepdim=True)
    y = torch.cat([x, torch.randn(200, dim, generator=g)])
    y = y / y.norm(dim=1, keepdim=True)
    exact = x.double() @ y.double().T
    fp32 = x @ y.T
    half = (x.to(dtype) @ y.to(dtype).T).float()
    assert (half - fp32).abs().max() <= lowp_error(dtype, dim)
    assert (half.double() - exact).abs().max() <= lowp_error(dtype, dim)


def test_unknown_precision_is_an_error():
    items, texts, owner = random_problem()
    with pytest.raises(ValueError, match=r"precision must be one of \['bf16', 'fp16', 'fp32'\], found 'int8'"):
        retrieval_recall(items, texts, owner, precision="int8")


def test_a_global_tf32_setting_does_not_leak_in_or_out():
    items, texts, owner = random_problem(seed=2)
    expected = retrieval_recall(items, texts, owner, return_ranks=True)
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        got = retrieval_recall(items, texts, owner, return_ranks=True)
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(before)
    assert got["i2t_ranks"].tolist() == expected["i2t_ranks"].tolist()


# ---------------------------------------------------------------- re-ranking


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


# ---------------------------------------------------------------- devices


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_same_result_on_gpu(precision):
    items, texts, owner = random_problem(n_items=300, dim=64, seed=9, noise=1.0)
    cpu = retrieval_recall(items, texts, owner, precision=precision, return_ranks=True)
    gpu = retrieval_recall(items, texts, owner, precision=precision, device="cuda", return_ranks=True)
    assert recalls(gpu) == recalls(cpu)
    assert gpu["i2t_ranks"].tolist() == cpu["i2t_ranks"].tolist() or precision != "fp32"
