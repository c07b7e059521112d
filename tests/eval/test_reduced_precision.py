"""Half-precision tiles (fp16 / bf16) give the float32 recall: every query the rounding
could affect is settled in float32, within a proven error bound (``lowp_error``).

Checked against the ``"fp32"`` result and the plain reference of ``_reference``.
"""

from __future__ import annotations

import pytest
import torch

from _reference import near_tie_problem, random_problem, recalls, reference_ranks, score_matrix
from vlr_plugins.eval import retrieval_recall
from vlr_plugins.eval._tiles import ScoreMatrix
from vlr_plugins.eval.exact_ranks import exact_ranks
from vlr_plugins.eval.reduced_precision import bracketed_ranks, lowp_error

KS = (1, 5, 10)
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


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
    S = score_matrix(items, texts).to(DTYPES[precision]).float()
    naive_t2i = (S > S[owner, torch.arange(len(owner))]).sum(0)
    assert (naive_t2i != torch.tensor(t2i)).any()

    got = retrieval_recall(items, texts, owner, ks=KS, precision=precision, return_ranks=True)

    # ...but the reported ranks below max(ks), hence recall@k, are the fp32 ones
    for key, expected in (("i2t_ranks", i2t), ("t2i_ranks", t2i)):
        for r, e in zip(got[key].tolist(), expected):
            assert r == e if e < max(KS) else max(KS) <= r <= e
    assert recalls(got) == recalls(retrieval_recall(items, texts, owner, ks=KS))


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_bracketed_ranks_are_exact_below_k_max_with_small_tiles(precision):
    items, texts, owner = near_tie_problem(seed=1)
    matrix = ScoreMatrix(items, texts, owner, device=torch.device("cpu"), max_chunk_bytes=2048, chunk_size=5)

    fast = bracketed_ranks(matrix, DTYPES[precision], k_max=3)

    for got, exact in zip(fast, exact_ranks(matrix)):
        below = exact < 3
        assert torch.equal(got[below], exact[below]) and (got[~below] >= 3).all()


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
