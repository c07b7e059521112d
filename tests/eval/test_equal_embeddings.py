"""Equal embeddings tie wherever they sit: the tie rule (a candidate scoring as the positive is
ahead only at a lower gallery index) must not depend on where a tile, a block of a diagonal tile
or a row-wise product puts two equal vectors. BLAS rounds a dot product by the product's shape
and by where it sits in it (a matrix-vector product's last elements, the small-matrix kernels of
OpenBLAS), so every product the engine makes is one of a shape that scores equal rows equally
(:func:`~vlr_plugins.eval._cpu_blas.tile_product`), and each pass multiplies one shape.

The references need no sort: with every item equal and every text equal, all scores tie, so an
item's best text ranks at its first text's index, a text's owner at the owner's index and a text
in its owner's row at its own index. With duplicates scattered over blocks of different sizes
the check is the full score matrix, each text counted against its owner's row (ties by lower
index)."""

from __future__ import annotations

import itertools

import pytest
import torch

from _reference import score_matrix, torch_threads
from vlr_plugins.eval import DualSoftmax, QueryBankNorm, retrieval_recall
from vlr_plugins.eval._cpu_blas import tile_product

METRICS = ("mdr", "map@10")
#: (chunk_size, max_chunk_bytes): one tile; one-item tiles (one-row products); tiny tiles
TILES = [(None, 256 * 2**20), (1, 2**20), (None, 900), (3, 1500)]


def constant_problem(n_items: int, per_item: list[int], dim: int, grouped: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    owner = torch.tensor([i for i in range(n_items) for _ in range(per_item[i % len(per_item)])])
    if not grouped:
        owner = owner[torch.randperm(len(owner), generator=g)]
    items = torch.randn(dim, generator=g).expand(n_items, dim).clone()
    texts = torch.randn(dim, generator=g).expand(len(owner), dim).clone()
    return items, texts, owner


def expected_constant(owner: torch.Tensor, n_items: int) -> dict[str, list[int]]:
    first = [int((owner == i).nonzero()[0]) for i in range(n_items)]
    return {"i2t_ranks": first, "t2i_ranks": owner.tolist(), "i2t_pair_ranks": list(range(len(owner)))}


@pytest.mark.parametrize("dim", [4, 16, 256])
@pytest.mark.parametrize("grouped", [True, False])
@pytest.mark.parametrize("chunk_size, max_chunk_bytes", TILES)
def test_all_scores_equal_rank_by_index_alone(cpu_blas, dim, grouped, chunk_size, max_chunk_bytes):
    items, texts, owner = constant_problem(23, [1, 3, 2, 5], dim, grouped)
    want = expected_constant(owner, len(items))
    for threads in (1, 2):
        with torch_threads(threads):
            got = retrieval_recall(items, texts, owner, rank_metrics=METRICS, return_ranks=True,
                                   chunk_size=chunk_size, max_chunk_bytes=max_chunk_bytes)
        for key, value in want.items():
            assert got[key].tolist() == value, (key, threads)


@pytest.mark.parametrize("renorm", ["dsl", "qbnorm"])
@pytest.mark.parametrize("grouped", [True, False])
def test_all_scores_equal_rank_by_index_alone_after_renormalisation(renorm, grouped):
    """Equal scores stay equal under DSL and QB-Norm (equal columns, equal statistics)."""
    items, texts, owner = constant_problem(17, [2, 1, 4], 16, grouped, seed=1)
    bank = torch.randn(9, 16, generator=torch.Generator().manual_seed(2))
    transform = DualSoftmax(30.0) if renorm == "dsl" else QueryBankNorm(text_bank=bank, item_bank=bank)
    want = expected_constant(owner, len(items))
    for chunk_size, max_chunk_bytes in TILES:
        got = retrieval_recall(items, texts, owner, renorm=transform, rank_metrics=METRICS, return_ranks=True,
                               chunk_size=chunk_size, max_chunk_bytes=max_chunk_bytes)
        for key, value in want.items():
            assert got[key].tolist() == value, (key, chunk_size, max_chunk_bytes)


def test_duplicates_in_diagonal_blocks_of_different_sizes(cpu_blas):
    """Texts grouped by item, items with 1-9 texts (so the diagonal blocks differ in size), exact
    duplicate texts of other owners in other blocks: found as a last-bit difference between a
    2 x 12 and a 2 x 10 block's product before every block was multiplied at one shape."""
    g = torch.Generator().manual_seed(5)
    per_item = [5, 9, 3, 2, 1, 1, 5, 2, 2, 9, 1, 3, 1, 1, 2, 1, 3, 5]
    owner = torch.tensor([i for i, k in enumerate(per_item) for _ in range(k)])
    items = torch.randn(len(per_item), 4, generator=g)
    texts = items[owner] + 1.5 * torch.randn(len(owner), 4, generator=g)
    for a, b in ((13, 31), (15, 21), (17, 26), (19, 44), (2, 50)):
        texts[b] = texts[a]
    s = score_matrix(items, texts)
    for chunk_size, max_chunk_bytes in ((3, 300), (2, 400), (None, 900), (None, 256 * 2**20)):
        got = retrieval_recall(items, texts, owner, rank_metrics=METRICS, return_ranks=True,
                               chunk_size=chunk_size, max_chunk_bytes=max_chunk_bytes)
        for j, i in enumerate(owner.tolist()):
            row = s[i]
            ahead = int((row > row[j]).sum() + ((row == row[j]) & (torch.arange(len(row)) < j)).sum())
            assert got["i2t_pair_ranks"][j] == ahead, (chunk_size, max_chunk_bytes, i, j)


@pytest.mark.parametrize("dim", [16, 64, 256])
def test_a_product_scores_equal_rows_and_columns_equally_everywhere(cpu_blas, dim):
    """tile_product of every shape the engine makes (one row, a few columns, small and tile-sized
    blocks): all rows equal, all columns equal, so every score must be the same float."""
    g = torch.Generator().manual_seed(dim)
    shapes = [(1, c) for c in (7, 8, 15, 33, 700)] + [(r, 1) for r in (2, 5, 17, 300)]
    shapes += [(r, c) for r in (2, 3, 7, 17, 65) for c in (2, 9, 15, 33, 127, 257)] + [(129, 700), (300, 77)]
    for (r, c), trial in itertools.product(shapes, range(3)):
        row, col = torch.randn(2, dim, generator=g)
        out = tile_product(row.expand(r, dim).contiguous(), col.expand(c, dim).contiguous(), torch.empty(r, c))
        assert bool((out == out[0, 0]).all()), (r, c, trial)


@pytest.mark.parametrize("chunk_size, max_chunk_bytes", TILES)
def test_mining_equal_scores_takes_the_lowest_indices(cpu_blas, chunk_size, max_chunk_bytes):
    """All scores equal: each query's negatives are the lowest gallery indices that are not its
    positives, after the first ``range_min`` of them."""
    from vlr_plugins.eval import mine_hard_negatives

    g = torch.Generator().manual_seed(3)
    queries = torch.randn(16, generator=g).expand(11, 16).clone()
    gallery = torch.randn(16, generator=g).expand(37, 16).clone()
    positives = [[q, (3 * q + 5) % 37] for q in range(11)]
    got = mine_hard_negatives(queries, gallery, positives, k=4, range_min=2, chunk_size=chunk_size,
                              max_chunk_bytes=max_chunk_bytes)
    for q, pos in enumerate(positives):
        free = [j for j in range(37) if j not in pos]
        assert got.indices[q].tolist() == free[2:6], q
