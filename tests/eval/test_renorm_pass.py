"""The statistics pass's log-sum-exp (:func:`~vlr_plugins.eval.renorm_pass.shifted_lse`): one
exponential per score against a constant shift, equal to a float64 log-sum-exp written here, with
the rows and columns whose terms underflow summed again, and equal columns given equal bits
wherever they sit in a padded tile."""

from __future__ import annotations

import math

import pytest
import torch

from _reference import torch_threads
from vlr_plugins.eval.renorm_keys import with_slack
from vlr_plugins.eval.renorm_pass import lse_shift, merge_best, padded_width, shifted_lse, tile_best, tile_positions, update_best


def _reference(scaled: torch.Tensor, dim: int) -> torch.Tensor:
    """log2 sum 2^x along ``dim``, in float64 with its own maximum."""
    x = scaled.double()
    peak = x.amax(dim, keepdim=True)
    return (torch.log2(torch.exp2(x - peak).sum(dim)) + peak.squeeze(dim))


def _tile(scores: torch.Tensor, scale: float):
    """The scaled scores in a padded tile, and the ``again`` that gives their rows / columns."""
    rows, cols = scores.shape
    width = padded_width(cols)
    terms = with_slack(rows, width)
    terms.normal_()  # what a tile's padding holds is never summed into a row
    scaled = scores * scale
    terms[:, :cols] = scaled
    asked = []

    def again(dim, index):
        asked.append((dim, index.tolist()))
        return scaled[index] if dim == 1 else scaled[:, index]

    return terms, cols, again, asked


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows,cols", [(1, 1), (7, 63), (33, 64), (40, 130), (300, 257)])
def test_equal_to_a_float64_log_sum_exp(threads, rows, cols):
    torch.manual_seed(rows * 1000 + cols)
    scale = 100.0 / math.log(2.0)
    scores = torch.nn.functional.normalize(torch.randn(rows, 16), dim=1) @ \
        torch.nn.functional.normalize(torch.randn(cols, 16), dim=1).T
    terms, n, again, asked = _tile(scores, scale)
    with torch_threads(threads):
        row_lse, col_lse = shifted_lse(terms, lse_shift(scale), (1, 0), n, again)
    assert row_lse.dtype == col_lse.dtype == torch.float64
    # summed again: exactly the rows and columns whose terms sum below 2^-62 (float64 here)
    terms64 = torch.exp2(scores.double() * scale - lse_shift(scale))
    low = [(1, (terms64.sum(1) < 2.0 ** -62).nonzero().flatten().tolist()),
           (0, (terms64.sum(0) < 2.0 ** -62).nonzero().flatten().tolist())]
    assert asked == [(d, i) for d, i in low if i], asked
    torch.testing.assert_close(row_lse, _reference(scores * scale, 1), rtol=0, atol=1e-5)
    torch.testing.assert_close(col_lse, _reference(scores * scale, 0), rtol=0, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
def test_rows_and_columns_far_below_the_shift_are_summed_again(threads):
    """Scores of -1 at tau = 100: 2^(-288) per term underflows float32; those rows and columns
    come from the fallback (own maximum), the others from the shifted sums."""
    scale = 100.0 / math.log(2.0)
    scores = torch.full((20, 70), -1.0)
    scores[:10, :35] = torch.rand(10, 35) * 0.5 + 0.5  # a block of ordinary scores
    scores[15, 3] = -0.1  # one row and column whose best term sits 2^-14 above float32's least
    terms, n, again, asked = _tile(scores, scale)
    with torch_threads(threads):
        row_lse, col_lse = shifted_lse(terms, lse_shift(scale), (1, 0), n, again)
    # rows 10..19 but 15 and columns 35..69 but 3 hold only scores of -1: summed again
    assert asked == [(1, [r for r in range(10, 20) if r != 15]), (0, list(range(35, 70)))]
    for got, dim in ((row_lse, 1), (col_lse, 0)):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, _reference(scores * scale, dim), rtol=0, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("cols", [64, 100, 193])
def test_equal_columns_get_equal_bits_at_every_position(threads, cols):
    """The same scores in every column (the vector loop's lanes and what would be its scalar
    rest): bit-equal sums, and so equal statistics for exact duplicates of a gallery entry."""
    torch.manual_seed(cols)
    scale = 100.0 / math.log(2.0)
    column = torch.rand(257, 1) * 2 - 1
    terms, n, again, _ = _tile(column.expand(257, cols), scale)
    with torch_threads(threads):
        col_lse, = shifted_lse(terms, lse_shift(scale), (0,), n, again)
    assert bool((col_lse == col_lse[0]).all()), "equal columns got different sums"


@pytest.mark.parametrize("kernel", ["torch", "numba"])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("order", ["forward", "backward", "shuffled"])
def test_running_best_over_tiles_in_any_order_is_the_lowest_index_maximum(dim, order, kernel, monkeypatch):
    """update_best over the tiles of a matrix with many exact ties (scores from a few values),
    in any order of the tiles: each query's maximum and its lowest gallery index, as argmax; in
    torch's operations and in numba's compiled loop (where numba is installed)."""
    if kernel == "numba":
        pytest.importorskip("numba")
    monkeypatch.setenv("VLR_COUNT_KERNEL", kernel)
    g = torch.Generator().manual_seed(dim)
    queries, gallery, step = 37, 300, 64
    scores = torch.randint(0, 6, (queries, gallery), generator=g).float() / 5  # ties everywhere
    scores[3] = 0.2  # a query whose every score ties
    scores[5, 250:] = 2.0  # a late maximum
    best, index = torch.full((queries,), -math.inf), torch.full((queries,), gallery, dtype=torch.long)
    starts = list(range(0, gallery, step))
    if order == "backward":
        starts.reverse()
    elif order == "shuffled":
        starts = [starts[i] for i in torch.randperm(len(starts), generator=g).tolist()]
    positions = tile_positions(gallery, torch.device("cpu"))
    for g0 in starts:
        part = scores[:, g0:g0 + step]
        tile = part.T.contiguous() if dim == 0 else part.contiguous()  # dim 0: queries are columns
        update_best(tile, dim, g0, best, index, torch.empty_like(tile), positions)
    assert torch.equal(best, scores.max(1).values)
    assert torch.equal(index, scores.argmax(1))  # the first maximal: the lowest index


@pytest.mark.parametrize("kernel", ["torch", "numba"])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("held", [3, 4096])
def test_running_top1_reads_only_the_reached_queries_and_keeps_the_lowest_index_maximum(dim, held, kernel, monkeypatch):
    """RunningTop1 as the grouped pass drives it: each query's positive sits in one tile (the
    diagonal, given to update_best by the worker that visits it), every other tile goes to one of
    two workers' RunningTop1 with its raw count of each query (scores >= the positive's before
    it, > after), in a shuffled order; merged, each query's maximum and its lowest index, as
    argmax. Ties everywhere: maxima equal to the positive before and after it, a query whose every
    score ties, a late maximum; merges every 3 kept maxima (and every tile) or only at the end."""
    if kernel == "numba":
        pytest.importorskip("numba")
    from vlr_plugins.eval import renorm_pass

    monkeypatch.setenv("VLR_COUNT_KERNEL", kernel)
    monkeypatch.setattr(renorm_pass, "_HELD", held)
    g = torch.Generator().manual_seed(7 + dim)
    queries, gallery, step, diagonal = 41, 320, 64, 128  # every positive in the tile of entries 128..191
    # a few scores reach a query's positive (0.6), some tie with it: most of a tile's queries unreached
    sparse = torch.rand(queries, gallery, generator=g) < 0.004
    scores = torch.where(sparse, torch.randint(2, 5, (queries, gallery), generator=g).float() / 5, 0.0)
    positive = diagonal + torch.randint(0, step, (queries,), generator=g)
    scores[torch.arange(queries), positive] = 0.6
    scores[3], positive[3] = 0.2, 150  # every score ties: the top-1 is the first entry, before the positive
    scores[5, 250:] = 2.0  # a late maximum
    scores[6], positive[6] = 0.0, 140
    scores[6, [10, 140]] = 1.0  # a maximum tied with the positive, before it
    scores[8], positive[8] = 0.0, 150
    scores[8, [150, 300]] = 1.0  # ... and after it
    scores[9], positive[9] = 0.0, 160
    scores[9, [5, 70, 160, 260]] = 0.6  # ties with the positive in three tiles, two before it
    scores[10], positive[10] = 0.0, 130
    scores[10, [20, 90, 130, 300]] = torch.tensor([0.8, 0.8, 0.6, 0.8])  # equal maxima in three tiles
    scores[11], positive[11] = 0.0, 170
    scores[11, [10, 170, 300]] = torch.tensor([0.6, 0.6, 0.8])  # a lower entry before the maximum
    before = torch.arange(gallery) < positive[:, None]
    at_positive = scores.gather(1, positive[:, None])
    reached_all = torch.where(before, scores >= at_positive, scores > at_positive).float()
    positions = tile_positions(gallery, torch.device("cpu"))
    for _ in range(4):  # tile orders and workers
        workers = [(torch.full((queries,), -math.inf), torch.full((queries,), gallery, dtype=torch.long))
                   for _ in range(2)]
        running = [renorm_pass.RunningTop1(*w) for w in workers]
        starts = [range(0, gallery, step)[i] for i in torch.randperm(-(-gallery // step), generator=g).tolist()]
        for g0 in starts:
            part = scores[:, g0:g0 + step]
            tile = part.T.contiguous() if dim == 0 else part.contiguous()  # dim 0: queries are columns
            if g0 == diagonal:
                update_best(tile, dim, g0, *workers[0], torch.empty_like(tile), positions)
                continue
            reached = reached_all[:, g0:g0 + step].sum(1)
            worker = int(torch.randint(0, 2, (), generator=g))
            running[worker].tile(tile, dim, g0, 0, reached, torch.empty_like(tile), positions)
        for r in running:
            r.flush()
        best, index = workers[0]
        merge_best(best, index, *workers[1])
        assert torch.equal(best, scores.max(1).values)
        assert torch.equal(index, scores.argmax(1))  # the first maximal: the lowest index


@pytest.mark.parametrize("dim", [0, 1])
def test_tile_best_finds_the_first_maximum_wherever_the_maxima_sit(dim):
    """tile_best's positions, against argmax, where its sum of 1-based positions could mislead:
    maxima at the first and at another position (their sum less one is the other's position),
    at the first alone, at the last alone, in every place, and at three places."""
    candidates = 9
    rows = [[0.0] * candidates for _ in range(6)]
    rows[0][0] = rows[0][5] = 1.0   # 1 + 6 - 1 = 6: past the maxima, where the mask is 0
    rows[1][0] = 1.0
    rows[2][candidates - 1] = 1.0
    rows[3] = [0.5] * candidates
    rows[4][2] = rows[4][3] = rows[4][7] = 1.0
    rows[5][4] = -0.5  # a maximum of 0 everywhere else
    scores = torch.tensor(rows)
    tile = scores.T.contiguous() if dim == 0 else scores
    positions = tile_positions(candidates, torch.device("cpu"))
    for aliased in (False, True):  # a work buffer, or the tile itself (overwritten by its mask)
        given = tile.clone()
        found, at = tile_best(given, dim, given if aliased else torch.empty_like(given), positions)
        assert torch.equal(found, scores.max(1).values)
        assert torch.equal(at, scores.argmax(1))
