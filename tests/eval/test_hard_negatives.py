"""mine_hard_negatives: exact hard negatives, whatever the tiling and the number of workers.

Every result is checked against a brute-force reference written here (the whole float64
score matrix, each query's gallery sorted by (-score, index), positives and the margin
filtered out, the window sliced), and against sentence-transformers' own
``mine_hard_negatives`` and faiss' exact ``IndexFlatIP`` search on tie-free data.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from _reference import torch_threads
from vlr_plugins.eval import mine_hard_negatives
from vlr_plugins.eval.hard_negatives import _Miner, positives_csr

CPU = torch.device("cpu")


def reference(queries, gallery, positives, *, k, range_min=0, range_max=None, margin=None):
    """(indices, scores) lists per query, brute force."""
    scores = F.normalize(queries.double(), dim=1) @ F.normalize(gallery.double(), dim=1).T
    out_idx, out_scores = [], []
    for q, row in enumerate(scores.tolist()):
        own = {int(p) for p in positives[q]}
        ranked = sorted((-s, j) for j, s in enumerate(row) if j not in own)
        if margin is not None:
            lowest = min(row[p] for p in own)
            ranked = [(s, j) for s, j in ranked if -s <= lowest - margin]
        window = ranked[range_min:range_max][:k]
        out_idx.append([j for _, j in window])
        out_scores.append([-s for s, _ in window])
    return out_idx, out_scores


def assert_matches(result, queries, gallery, positives, **kwargs):
    expected_idx, expected_scores = reference(queries, gallery, positives, **kwargs)
    k = kwargs["k"]
    assert result.indices.shape == result.scores.shape == (len(queries), k)
    assert result.counts.tolist() == [len(row) for row in expected_idx]
    for q, (row, scores) in enumerate(zip(expected_idx, expected_scores)):
        got = result.indices[q].tolist()
        assert got == row + [-1] * (k - len(row)), f"query {q}"
        assert not set(got) & {int(p) for p in positives[q]}, f"query {q} got a positive"
        assert torch.isnan(result.scores[q, len(row):]).all()
        assert result.scores[q, :len(row)].tolist() == pytest.approx(scores, abs=1e-6)


def random_problem(n_queries=60, n_gallery=700, dim=12, seed=0):
    """Gaussian vectors (no ties), 0-4 positives per query."""
    g = torch.Generator().manual_seed(seed)
    queries, gallery = torch.randn(n_queries, dim, generator=g), torch.randn(n_gallery, dim, generator=g)
    positives = [torch.randint(0, n_gallery, (int(torch.randint(0, 5, (), generator=g)),), generator=g).tolist()
                 for _ in range(n_queries)]
    return queries, gallery, positives


def tied_problem(n_queries=50, n_gallery=400, seed=1):
    """Exact ties everywhere, exact in any product: +-1 vectors of 16 dims (unit entries
    +-1/4, scores multiples of 1/8), half of the gallery duplicates of the other half,
    1-3 positives per query, some of them duplicated in the gallery."""
    g = torch.Generator().manual_seed(seed)
    signs = lambda n: torch.randint(0, 2, (n, 16), generator=g).float() * 2 - 1  # noqa: E731
    half = signs(n_gallery // 2)
    gallery = torch.cat([half, half[torch.randperm(len(half), generator=g)]])
    queries = signs(n_queries)
    queries[::5] = gallery[torch.randint(0, n_gallery, (len(queries[::5]),), generator=g)]  # score 1 exists
    positives = [torch.randint(0, n_gallery, (int(torch.randint(1, 4, (), generator=g)),), generator=g).tolist()
                 for _ in range(n_queries)]
    return queries, gallery, positives


@pytest.fixture(params=["torch", "numba"])
def loops(request, monkeypatch):
    """The miner's lists kept by torch's block maxima and merges, or by numba's compiled loop
    (``VLR_COUNT_KERNEL``)."""
    if request.param == "numba":
        pytest.importorskip("numba")
    monkeypatch.setenv("VLR_COUNT_KERNEL", request.param)
    return request.param


TILINGS = [
    dict(),  # one tile
    dict(max_chunk_bytes=2048),  # 8 queries x 32 gallery entries: many tiles and merges
    dict(chunk_size=3, max_chunk_bytes=4096),  # 3 queries x 160
    dict(chunk_size=1, max_chunk_bytes=256),  # single queries x 32
]
WINDOWS = [
    dict(k=5),
    dict(k=4, range_min=3),
    dict(k=10, range_min=2, range_max=7),  # the window holds 5
    dict(k=3, range_min=0, range_max=50),
]


@pytest.mark.parametrize("problem", [random_problem, tied_problem])
@pytest.mark.parametrize("tiling", TILINGS)
@pytest.mark.parametrize("window", WINDOWS)
def test_any_tiling_gives_the_reference(cpu_blas, problem, tiling, window):
    queries, gallery, positives = problem()
    result = mine_hard_negatives(queries, gallery, positives, **window, **tiling)
    assert_matches(result, queries, gallery, positives, **window)


@pytest.mark.parametrize("tiling", TILINGS)
@pytest.mark.parametrize("margin", [0.0, 0.25, -0.125])
def test_margin_on_exact_ties(loops, tiling, margin):
    """Scores are multiples of 1/8: many candidates lie exactly on the margin's bound and
    must be kept (score <= lowest positive - margin)."""
    queries, gallery, positives = tied_problem()
    result = mine_hard_negatives(queries, gallery, positives, k=6, range_min=1, margin=margin, **tiling)
    assert_matches(result, queries, gallery, positives, k=6, range_min=1, margin=margin)


@pytest.mark.parametrize("margin", [0.0, 0.1])
def test_margin_on_random_data(loops, margin):
    queries, gallery, positives = random_problem()
    positives = [p or [q] for q, p in enumerate(positives)]  # a margin needs a positive
    for tiling in TILINGS:
        result = mine_hard_negatives(queries, gallery, positives, k=8, margin=margin, **tiling)
        assert_matches(result, queries, gallery, positives, k=8, margin=margin)


def test_scored_again_in_the_main_tiles_gives_the_reference(loops):
    """The path of a query whose positive scores differed between two products: its
    positives scored in the main pass's own tiles first."""
    queries, gallery, positives = tied_problem()
    offsets, indices = positives_csr(positives, len(queries), len(gallery))
    miner = _Miner(queries, gallery, offsets, indices, depth=7, margin=0.125, chunk_size=None,
                   device=CPU, max_chunk_bytes=2048)
    with torch.no_grad():
        for a in range(0, len(queries), miner.rows):
            block = torch.arange(a, min(a + miner.rows, len(queries)))
            assert miner.mine_block(miner.workers[0], block, same_tiles=True) is None
    expected, _ = reference(queries, gallery, positives, k=6, range_min=1, margin=0.125)
    for q, row in enumerate(expected):
        assert [j for j in miner.top_idx[q, 1:].tolist() if j >= 0] == row


def test_more_than_available(loops):
    """k beyond what is left: -1 and nan after the last, counts say how many."""
    queries, gallery, positives = tied_problem(n_queries=9, n_gallery=20)
    result = mine_hard_negatives(queries, gallery, positives, k=30, range_min=4, max_chunk_bytes=1024)
    assert_matches(result, queries, gallery, positives, k=30, range_min=4)
    assert (result.counts < 30).all() and (result.counts > 0).all()


def test_two_workers(cpu_blas):
    """With 2 torch threads and a budget of 2 workers' tiles, each worker mines its own
    query blocks."""
    with torch_threads(2):
        _two_workers()


def _two_workers():
    queries, gallery, positives = random_problem(n_queries=300, n_gallery=3000, dim=16)
    offsets, indices = positives_csr(positives, len(queries), len(gallery))
    assert len(_Miner(queries, gallery, offsets, indices, depth=9, margin=None, chunk_size=None, device=CPU,
                      max_chunk_bytes=2**20).workers) == 2
    result = mine_hard_negatives(queries, gallery, positives, k=6, range_min=3, max_chunk_bytes=2**20)
    assert_matches(result, queries, gallery, positives, k=6, range_min=3)
    again = mine_hard_negatives(queries, gallery, positives, k=6, range_min=3, max_chunk_bytes=2**20)
    assert torch.equal(again.indices, result.indices) and torch.equal(again.scores, result.scores)


def test_csr_and_lists_agree_and_bad_positives_are_named():
    queries, gallery, positives = random_problem(n_queries=6, n_gallery=50)
    offsets, indices = positives_csr(positives, 6, 50)
    from_csr = mine_hard_negatives(queries, gallery, (offsets, indices), k=4)
    from_lists = mine_hard_negatives(queries, gallery, [torch.tensor(p) for p in positives], k=4)
    assert torch.equal(from_csr.indices, from_lists.indices)
    bad = [p[:] for p in positives]
    bad[3] = [1, 50]
    with pytest.raises(ValueError, match=r"query 3 has gallery index 50"):
        mine_hard_negatives(queries, gallery, bad, k=4)
    empty = [p or [0] for p in positives]
    empty[2] = []
    mine_hard_negatives(queries, gallery, empty, k=4)  # allowed without a margin
    with pytest.raises(ValueError, match=r"query 2 has no positive"):
        mine_hard_negatives(queries, gallery, empty, k=4, margin=0.0)
    with pytest.raises(ValueError, match="7 lists for 6 queries"):
        mine_hard_negatives(queries, gallery, positives + [[]], k=4)


def test_equals_faiss_exact_search(cpu_blas):
    """faiss' IndexFlatIP over the unit vectors: search k + range_min + most positives,
    drop the positives, slice the window."""
    faiss = pytest.importorskip("faiss")
    queries, gallery, positives = random_problem(n_queries=80, n_gallery=2000, dim=24, seed=3)
    k, range_min = 7, 2
    unit_q, unit_g = (F.normalize(x, dim=1).numpy() for x in (queries, gallery))
    index = faiss.IndexFlatIP(unit_g.shape[1])
    index.add(unit_g)
    depth = k + range_min + max(len(p) for p in positives)
    faiss_scores, faiss_idx = index.search(unit_q, depth)
    result = mine_hard_negatives(queries, gallery, positives, k=k, range_min=range_min, max_chunk_bytes=4096)
    for q in range(len(queries)):
        keep = ~np.isin(faiss_idx[q], positives[q])
        assert result.indices[q].tolist() == faiss_idx[q][keep][range_min:range_min + k].tolist()
        np.testing.assert_allclose(result.scores[q].numpy(), faiss_scores[q][keep][range_min:range_min + k],
                                   atol=1e-6)


def _static_model(vectors: torch.Tensor):
    """A real SentenceTransformer whose text "t<i>" embeds as vectors[i] (one word each)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({f"t{i}": i for i in range(len(vectors))}, unk_token="t0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return SentenceTransformer(modules=[StaticEmbedding(tokenizer, embedding_weights=vectors)], device="cpu")


@pytest.mark.parametrize("window", [dict(k=3), dict(k=4, range_min=3), dict(k=2, range_min=1, range_max=6)])
def test_equals_sentence_transformers(window):
    """sentence-transformers' mine_hard_negatives on a static-embedding model of the same
    vectors (queries t0.., gallery texts after them; multi-positive queries are repeated
    anchors), output "labeled-list": its negatives in order. Its window is over the raw top
    range_max + max_positives, which without a margin holds ours."""
    st_util = pytest.importorskip("sentence_transformers.util")
    pytest.importorskip("datasets")
    from datasets import Dataset

    queries, gallery, positives = random_problem(n_queries=25, n_gallery=120, dim=16, seed=4)
    positives = [sorted(set(p or [q])) for q, p in enumerate(positives)]
    n_q = len(queries)
    model = _static_model(torch.cat([queries, gallery]))
    rows = [(f"t{q}", f"t{n_q + p}") for q, own in enumerate(positives) for p in own]
    dataset = Dataset.from_dict({"anchor": [a for a, _ in rows], "positive": [p for _, p in rows]})
    corpus = [f"t{n_q + j}" for j in range(len(gallery))]
    mined = st_util.mine_hard_negatives(
        dataset, model, corpus=corpus, num_negatives=window["k"], range_min=window.get("range_min", 0),
        range_max=window.get("range_max"), output_format="labeled-list", verbose=False)
    theirs = {}
    for anchor, docs in zip(mined["anchor"], mined["positive"]):
        theirs.setdefault(int(anchor[1:]), [int(d[1:]) - n_q for d in docs[1:]])
    ours = mine_hard_negatives(queries, gallery, positives, **window)
    for q in range(n_q):
        got = [j for j in ours.indices[q].tolist() if j >= 0]
        assert got == theirs.get(q, []), f"query {q}"
    assert not math.isnan(float(ours.scores[:, 0].sum()))


@pytest.mark.parametrize("pending", [1, 100, 10**9])  # merged after every tile, every few, once per block
@pytest.mark.parametrize("margin", [None, 0.125])
def test_deferred_merges_keep_the_tie_rule(monkeypatch, pending, margin):
    """The blocks read from several tiles are held and merged into the lists at once:
    exact ties (duplicated gallery halves, scores multiples of 1/8) straddle the merges
    and still go to the lower index (torch's path: numba's loop merges nothing)."""
    monkeypatch.setenv("VLR_COUNT_KERNEL", "torch")
    queries, gallery, positives = tied_problem(n_gallery=600)
    offsets, indices = positives_csr(positives, len(queries), len(gallery))
    miner = _Miner(queries, gallery, offsets, indices, depth=9, margin=margin, chunk_size=None, device=CPU,
                   max_chunk_bytes=2048)
    miner.pending_elems = pending
    merges, merge = [], miner.merge
    miner.merge = lambda *args: (merges.append(1), merge(*args))
    with torch.no_grad():
        _, top_idx = miner.run()
    n_blocks, n_tiles = -(-len(queries) // miner.rows), -(-len(gallery) // miner.cols)
    if pending == 10**9:
        assert len(merges) == n_blocks
    else:  # after every tile that read a block (not all do), or every few
        assert n_blocks < len(merges) <= n_blocks * n_tiles
        assert len(merges) > n_blocks * n_tiles // 2 or pending == 100
    expected, _ = reference(queries, gallery, positives, k=9, margin=margin)
    for q, row in enumerate(expected):
        assert [j for j in top_idx[q].tolist() if j >= 0] == row, f"query {q}"
