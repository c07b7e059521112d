"""retrieval_recall: exact recall@k in both directions, any number of texts per item.

Every result is checked against a naive reference written here: the full score
matrix, and for each query a Python sort of the whole gallery by (-score, index).
"""

from __future__ import annotations

import random

import pytest
import torch

import _reference
from _reference import ranks_of_best_positive, recalls
from vlr_plugins.eval import retrieval_recall
from vlr_plugins.registry import METRICS

KS = (1, 5, 10)


# ---------------------------------------------------------------- reference


def _unit_rows(x: torch.Tensor) -> list[list[float]]:
    x = x.double()
    return (x / x.norm(dim=1, keepdim=True)).tolist()


def reference_ranks(item_emb, text_emb, text_owner) -> tuple[list[int], list[int]]:
    """0-based positions: each item's first own text, each text's owner; ties by lower index."""
    items, texts, owner = _unit_rows(item_emb), _unit_rows(text_emb), text_owner.tolist()
    score = [[sum(a * b for a, b in zip(item, text)) for text in texts] for item in items]
    n, m = len(items), len(texts)
    i2t = []
    for i in range(n):
        order = sorted(range(m), key=lambda j: (-score[i][j], j))
        i2t.append(next(pos for pos, j in enumerate(order) if owner[j] == i))
    t2i = []
    for j in range(m):
        order = sorted(range(n), key=lambda i: (-score[i][j], i))
        t2i.append(order.index(owner[j]))
    return i2t, t2i


def reference_recall(i2t: list[int], t2i: list[int], ks=KS) -> dict[str, float]:
    out = {}
    for name, ranks in (("i2t", i2t), ("t2i", t2i)):
        for k in ks:
            out[f"{name}_r{k}"] = 100.0 * sum(r < k for r in ranks) / len(ranks)
        out[f"{name}_mean"] = sum(out[f"{name}_r{k}"] for k in ks) / len(ks)
    out["r_mean"] = (out["i2t_mean"] + out["t2i_mean"]) / 2
    return out


# ---------------------------------------------------------------- data


def random_owner(n_items: int, seed: int, max_texts: int = 6) -> torch.Tensor:
    """1..max_texts texts per item, the texts of different items interleaved."""
    rng = random.Random(seed)
    owner = [i for i in range(n_items) for _ in range(rng.randint(1, max_texts))]
    rng.shuffle(owner)
    return torch.tensor(owner)


def random_problem(n_items: int = 40, dim: int = 12, seed: int = 0):
    """Texts near their item, so that recall is neither 0 nor 100."""
    g = torch.Generator().manual_seed(seed)
    owner = random_owner(n_items, seed)
    items = torch.randn(n_items, dim, generator=g)
    texts = items[owner] + 1.2 * torch.randn(len(owner), dim, generator=g)
    return items, texts, owner


def tied_problem(n_items: int = 30, dim: int = 4, seed: int = 0):
    """Vectors of +-1 in 4 dims: after normalisation every entry is exactly +-0.5, so
    scores are exact multiples of 0.25 and most of them tie. Some items and texts are
    exact duplicates of others."""
    g = torch.Generator().manual_seed(seed)
    owner = random_owner(n_items, seed)
    items = torch.randint(0, 2, (n_items, dim), generator=g).float() * 2 - 1
    texts = torch.randint(0, 2, (len(owner), dim), generator=g).float() * 2 - 1
    items[5] = items[3]
    items[20] = items[3]
    texts[7] = texts[2]
    texts[-1] = texts[0]
    return items, texts, owner


def assert_same_result(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_the_naive_reference_with_several_texts_per_item(seed):
    items, texts, owner = random_problem(seed=seed)
    i2t, t2i = reference_ranks(items, texts, owner)
    expected = reference_recall(i2t, t2i)

    got = retrieval_recall(items, texts, owner, ks=KS, return_ranks=True)

    assert got["i2t_ranks"].tolist() == i2t
    assert got["t2i_ranks"].tolist() == t2i
    assert got["i2t_ranks"].shape == (len(items),) and got["t2i_ranks"].shape == (len(texts),)
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-4), key
    # the data are neither trivial nor hopeless
    assert 0 < got["t2i_r1"] < 100 and 0 < got["i2t_r1"] < 100


def test_returns_the_documented_keys():
    items, texts, owner = random_problem(n_items=12)
    got = retrieval_recall(items, texts, owner, ks=(1, 3))
    assert set(got) == {"i2t_r1", "i2t_r3", "t2i_r1", "t2i_r3", "i2t_mean", "t2i_mean", "r_mean"}
    with_ranks = retrieval_recall(items, texts, owner, ks=(1, 3), return_ranks=True)
    assert set(with_ranks) == set(got) | {"i2t_ranks", "t2i_ranks"}


@pytest.mark.parametrize("problem", [random_problem, tied_problem])
def test_chunk_size_does_not_change_the_result(problem):
    items, texts, owner = problem()
    results = [
        retrieval_recall(items, texts, owner, chunk_size=c, return_ranks=True)
        for c in (1, 3, 7, None, 10_000)
    ]
    for other in results[1:]:
        assert_same_result(results[0], other)


@pytest.mark.parametrize("seed", [0, 1])
def test_ties_go_to_the_lower_index(seed):
    items, texts, owner = tied_problem(seed=seed)
    i2t, t2i = reference_ranks(items, texts, owner)

    got = retrieval_recall(items, texts, owner, ks=KS, return_ranks=True)

    assert got["i2t_ranks"].tolist() == i2t
    assert got["t2i_ranks"].tolist() == t2i
    for key, value in reference_recall(i2t, t2i).items():
        assert got[key] == pytest.approx(value, abs=1e-4), key


def test_tie_rule_on_exact_duplicates():
    # item 0 and item 1 are the same vector; text 0 belongs to item 1, text 1 to item 0
    items = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    texts = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    owner = torch.tensor([1, 0, 2])

    got = retrieval_recall(items, texts, owner, ks=(1,), return_ranks=True)

    # item 0's own text (1) ties with text 0, which has the lower index: rank 1
    # item 1's own text (0) is first among the tied texts: rank 0
    assert got["i2t_ranks"].tolist() == [1, 0, 0]
    # text 0's owner (item 1) ties with item 0: rank 1; text 1's owner is item 0: rank 0
    assert got["t2i_ranks"].tolist() == [1, 0, 0]
    assert got["i2t_r1"] == pytest.approx(100 * 2 / 3, abs=1e-4)


def test_identical_rows_rank_behind_their_earlier_copies():
    # items = texts = the same rows, text j owned by item j: the positive of each query is
    # its own copy, at score exactly 1, so its rank is the number of identical rows before it
    g = torch.Generator().manual_seed(3)
    rows = (torch.randint(0, 2, (25, 4), generator=g).float() * 2 - 1) / 2  # unit rows
    owner = torch.arange(len(rows))
    listed = rows.tolist()
    expected = [sum(listed[k] == listed[j] for k in range(j)) for j in range(len(listed))]
    assert max(expected) > 0  # the data do contain duplicates

    got = retrieval_recall(rows, rows, owner, chunk_size=4, return_ranks=True)

    assert got["i2t_ranks"].tolist() == expected
    assert got["t2i_ranks"].tolist() == expected
    # the earlier ranker, kept as a reference, agrees
    same = ranks_of_best_positive(rows, rows, lambda a, b: owner[a:b, None] == owner[None, :], chunk_size=4)
    assert same.tolist() == expected


@pytest.mark.parametrize("chunk_size, max_chunk_bytes", [(None, 256 * 2**20), (96, 2**16)])
def test_agrees_with_the_earlier_ranker_on_a_larger_problem(chunk_size, max_chunk_bytes):
    # 400 items, 1-6 texts each, many tiles with the small budget. Entries +-1 in 16 dims:
    # unit entries are +-1/4, every score a multiple of 1/16, exact in any summation order,
    # so both rankers see the same scores, with many exact ties. A text is its item with 2
    # signs flipped (score 12/16 with it).
    g = torch.Generator().manual_seed(11)
    owner = random_owner(400, seed=11)
    items = torch.randint(0, 2, (400, 16), generator=g).float() * 2 - 1
    flip = torch.rand(len(owner), 16, generator=g).argsort(1)[:, :2]
    texts = items[owner].scatter(1, flip, -items[owner].gather(1, flip))
    unit_items, unit_texts = items / 4, texts / 4
    idx = torch.arange(len(items))
    i2t = ranks_of_best_positive(unit_items, unit_texts, lambda a, b: owner[None, :] == idx[a:b, None])
    t2i = ranks_of_best_positive(unit_texts, unit_items, lambda a, b: idx[None, :] == owner[a:b, None])

    got = retrieval_recall(items, texts, owner, chunk_size=chunk_size, max_chunk_bytes=max_chunk_bytes,
                           return_ranks=True)

    assert got["i2t_ranks"].tolist() == i2t.tolist()
    assert got["t2i_ranks"].tolist() == t2i.tolist()
    assert recalls(got) == reference_recall(i2t.tolist(), t2i.tolist())
    assert 0 < got["i2t_r1"] < 100 and 0 < got["t2i_r1"] < 100


def test_recall_is_the_exact_ratio_of_hits_to_queries():
    # 300 items, one text each: texts 0..88 equal their item (score 1, rank 0), the others
    # are their item negated (score -1, ranked last); so R@1 is 89 hits of 300 both ways
    g = torch.Generator().manual_seed(12)
    items = torch.randn(300, 16, generator=g)
    texts = torch.cat([items[:89], -items[89:]])

    got = retrieval_recall(items, texts, torch.arange(300), ks=(1,))

    assert got["i2t_r1"] == got["t2i_r1"] == 100 * 89 / 300  # not its float32 rounding, 29.666666
    assert got["r_mean"] == 100 * 89 / 300


def test_input_dtype_does_not_matter_only_values_do():
    items, texts, owner = random_problem(seed=4)
    as_float32 = retrieval_recall(items, texts, owner, return_ranks=True)
    # float64 copies of float32 values
    assert_same_result(as_float32, retrieval_recall(items.double(), texts.double(), owner,
                                                    return_ranks=True))
    # float16 inputs score like their (exact) float32 values
    items16, texts16 = items.half(), texts.half()
    assert_same_result(
        retrieval_recall(items16, texts16, owner, return_ranks=True),
        retrieval_recall(items16.float(), texts16.float(), owner, return_ranks=True),
    )


def test_embeddings_need_not_be_normalised():
    items, texts, owner = random_problem(seed=5)
    scale = torch.rand(len(items), 1) * 10 + 0.1
    assert_same_result(
        retrieval_recall(items, texts, owner, return_ranks=True),
        retrieval_recall(items * scale, texts * 3.0, owner, return_ranks=True),
    )


def test_owner_out_of_range_is_an_error():
    items, texts, owner = random_problem(n_items=5)
    bad = owner.clone()
    bad[0] = 5
    with pytest.raises(ValueError, match=r"text_owner values must lie in \[0, 5\), found \[0, 5\]"):
        retrieval_recall(items, texts, bad)
    bad[0] = -1
    with pytest.raises(ValueError, match=r"text_owner values must lie in \[0, 5\)"):
        retrieval_recall(items, texts, bad)


def test_an_item_without_texts_is_an_error():
    items = torch.randn(4, 3)
    texts = torch.randn(3, 3)
    with pytest.raises(ValueError, match=r"1 item\(s\) have no text, e.g. index 2"):
        retrieval_recall(items, texts, torch.tensor([0, 1, 3]))


def test_shape_mismatches_are_errors():
    items, texts = torch.randn(4, 3), torch.randn(4, 5)
    owner = torch.arange(4)
    with pytest.raises(ValueError, match=r"expected item_emb \(N, D\) and text_emb \(M, D\), "
                                         r"found \(4, 3\) and \(4, 5\)"):
        retrieval_recall(items, texts, owner)
    with pytest.raises(ValueError, match=r"found \(4,\) and \(4, 3\)"):
        retrieval_recall(torch.randn(4), torch.randn(4, 3), owner)
    with pytest.raises(ValueError, match=r"text_owner must be \(4,\), found \(3,\)"):
        retrieval_recall(torch.randn(4, 3), torch.randn(4, 3), torch.arange(3))


def test_unknown_precision_is_an_error():
    items, texts, owner = random_problem()
    with pytest.raises(ValueError, match=r"precision must be one of \['bf16', 'fp16', 'fp32'\], found 'int8'"):
        retrieval_recall(items, texts, owner, precision="int8")


def test_registered_as_a_metric():
    assert METRICS.get("retrieval_recall") is retrieval_recall


def test_agrees_with_torchmetrics_for_one_text_per_item():
    tm = pytest.importorskip("torchmetrics.functional.retrieval")
    g = torch.Generator().manual_seed(6)
    n, dim = 30, 8
    items = torch.randn(n, dim, generator=g)
    perm = torch.randperm(n, generator=g)
    owner = perm  # text j describes item perm[j]
    texts = items[owner] + 1.0 * torch.randn(n, dim, generator=g)
    score = torch.tensor(_unit_rows(items)) @ torch.tensor(_unit_rows(texts)).T  # no ties

    got = retrieval_recall(items, texts, owner, ks=KS)

    for k in KS:
        i2t = torch.stack([tm.retrieval_recall(score[i], owner == i, top_k=k) for i in range(n)])
        t2i = torch.stack([
            tm.retrieval_recall(score[:, j], torch.arange(n) == owner[j], top_k=k) for j in range(n)
        ])
        assert got[f"i2t_r{k}"] == pytest.approx(100 * i2t.mean().item(), abs=1e-4)
        assert got[f"t2i_r{k}"] == pytest.approx(100 * t2i.mean().item(), abs=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_same_result_on_gpu(precision):
    items, texts, owner = _reference.random_problem(n_items=300, dim=64, seed=9, noise=1.0)
    cpu = retrieval_recall(items, texts, owner, precision=precision, return_ranks=True)
    gpu = retrieval_recall(items, texts, owner, precision=precision, device="cuda", return_ranks=True)
    assert recalls(gpu) == recalls(cpu)
    assert gpu["i2t_ranks"].tolist() == cpu["i2t_ranks"].tolist() or precision != "fp32"
