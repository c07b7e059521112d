"""The tiles: their shape keeps a tile and its work buffer within the memory budget, the
counting kernel counts exactly, rows load with unit norm, and products stay float32.

The last test measures the whole of ``retrieval_recall`` against the memory bound its
docstring states, with the profiler's record of every tensor allocation on CPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from _reference import random_problem
from vlr_plugins.eval import retrieval_recall
from vlr_plugins.eval._tile_calibration import ENGINE, STATISTICS
from vlr_plugins.eval._tiles import (
    BYTES_PER_TILE_ELEM,
    ScoreMatrix,
    UnitRows,
    count_above,
    count_accumulators,
    cpu_tile_elems_per_thread,
    elems_for_l2,
    exact_matmuls,
    l2_cache_bytes,
    l2_share,
    tile_budget,
    tile_shape,
)

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
COCO_TRAIN = (118_287, 591_753)


# ---------------------------------------------------------------- tile shape


@pytest.mark.parametrize("budget", [8, 64, 4096, 100_000, 2**20, 2**28, 2**30])
@pytest.mark.parametrize("n, m", [(1, 1), (1, 7), (10, 50), (999, 7), (1000, 5000), COCO_TRAIN,
                                  (10**7, 5 * 10**7)])
@pytest.mark.parametrize("kind", [ENGINE, STATISTICS])
def test_a_tile_and_its_work_buffer_fit_the_budget(budget, n, m, kind):
    for device, threads in ((CPU, 1), (CPU, 2), (CPU, 16), (CUDA, None)):
        for chunk_size in (None, 1, 7, 512, 10**9):
            rows, cols = tile_shape(n, m, max_chunk_bytes=budget, device=device, chunk_size=chunk_size,
                                    threads=threads, kind=kind)
            where = (device.type, threads, chunk_size, rows, cols)
            assert 1 <= rows <= n and 1 <= cols <= m, where
            assert rows * cols * BYTES_PER_TILE_ELEM <= budget, where
            most = budget // BYTES_PER_TILE_ELEM
            if device.type == "cpu":  # each thread's share stays cache-sized: this machine's L2 in scores
                per_thread = cpu_tile_elems_per_thread(n * m, kind)
                assert rows * cols <= threads * per_thread, where
                most = min(most, threads * per_thread)
            if chunk_size is not None:  # chunk_size fixes the items per tile, within the budget
                assert rows == min(chunk_size, n, most), where
            else:  # evened out: the padding of the edge tiles is less than one row (column) per tile
                row_tiles, col_tiles = -(-n // rows), -(-m // cols)
                assert row_tiles * rows - n < row_tiles and col_tiles * cols - m < col_tiles, where


def test_the_cpu_share_of_a_thread_follows_the_l2_the_os_reports():
    # as many float32 scores as the L2 holds, within [64 Ki, 2 Mi] elements; unknown: a 2 MiB L2
    assert elems_for_l2(2 * 2**20) == 2**19  # the Intel Xeon the constant was measured on: 4 MiB a thread
    assert elems_for_l2(512 * 2**10) == 2**17 and elems_for_l2(2**20) == 2**18  # Zen 3, Zen 4
    assert elems_for_l2(None) == elems_for_l2(0) == 2**19
    assert elems_for_l2(64 * 2**10) == 2**16 and elems_for_l2(64 * 2**20) == 2**21
    assert l2_share() == cpu_tile_elems_per_thread() == elems_for_l2(l2_cache_bytes())
    sysfs = Path("/sys/devices/system/cpu/cpu0/cache/index2/size")
    if sysfs.is_file():  # Linux: what lscpu reads
        text = sysfs.read_text().strip()
        assert l2_cache_bytes() == int(text[:-1]) * {"K": 2**10, "M": 2**20}[text[-1]]
    assert tile_budget(max_chunk_bytes=2**40, device=CPU, threads=3) == 3 * cpu_tile_elems_per_thread()


def test_the_cpu_tile_defaults_to_the_number_of_threads():
    shape = tile_shape(*COCO_TRAIN, max_chunk_bytes=2**30, device=CPU)
    assert shape == tile_shape(*COCO_TRAIN, max_chunk_bytes=2**30, device=CPU, threads=torch.get_num_threads())


def test_the_score_matrix_uses_the_tile_shape_and_groups_texts_by_owner():
    items, texts, owner = random_problem(n_items=30)
    matrix = ScoreMatrix(items, texts, owner, device=CPU, max_chunk_bytes=4096, chunk_size=None)
    expected = tile_shape(30, len(texts), max_chunk_bytes=4096, device=CPU)
    assert (matrix.tile_items, matrix.tile_texts) == expected
    item_rows, text_rows, scores = matrix.tile_buffers(torch.float16)
    assert item_rows.shape == (matrix.tile_items, items.shape[1])
    assert text_rows.shape == (matrix.tile_texts, items.shape[1])
    assert scores.shape == (matrix.tile_items, matrix.tile_texts) and scores.dtype == torch.float16
    for i in range(30):
        mine = matrix.texts_by_owner[matrix.first_text[i]:matrix.first_text[i + 1]]
        assert mine.tolist() == (owner == i).nonzero().flatten().tolist()


# ---------------------------------------------------------------- kernel and rows


@pytest.mark.parametrize("dim", [0, 1])
def test_count_above_adds_the_number_of_scores_above_each_threshold(dim):
    g = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 5, (7, 9), generator=g).float()  # many equal values
    thresholds = torch.randint(0, 5, (9,) if dim == 0 else (7, 1), generator=g).float()
    start = torch.arange(scores.shape[1 - dim], dtype=torch.float32)
    for compare in (torch.gt, torch.eq):
        counts = start.clone()
        count_above(scores, thresholds, torch.empty(7, 9), dim, counts, torch.ones(9), compare=compare)
        assert counts.tolist() == (start + compare(scores, thresholds).sum(dim)).tolist()
    # float64 counts (more than 2^24 queries) take the same path through a float32 mask
    counts = start.double()
    count_above(scores, thresholds, torch.empty(7, 9), dim, counts, torch.ones(9))
    assert counts.tolist() == (start + (scores > thresholds).sum(dim)).tolist()


def test_counts_are_float32_while_exact():
    assert [c.dtype for c in count_accumulators(3, 2**24 - 1, CPU)] == [torch.float32] * 2
    assert [c.shape for c in count_accumulators(3, 5, CPU)] == [(3,), (5,)]
    assert all(c.dtype == torch.float64 for c in count_accumulators(2**24, 1, torch.device("meta")))


def test_unit_rows_load_normalised_rows_and_zero_the_rest():
    g = torch.Generator().manual_seed(1)
    emb = torch.randn(10, 6, generator=g).half()
    rows = UnitRows(emb, CPU)
    reference = emb.double() / emb.double().norm(dim=1, keepdim=True)
    for out in (torch.full((5, 6), 7.0), torch.full((5, 6), 7.0, dtype=torch.bfloat16)):
        assert rows.load(torch.tensor([9, 2, 4]), out) == 3
        assert torch.allclose(out[:3].double(), reference[[9, 2, 4]], atol=1e-2)
        assert (out[3:] == 0).all()
    out = torch.empty(5, 6)
    assert rows.load(slice(8, 13), out) == 2 and torch.allclose(out[:2].double(), reference[8:], atol=1e-6)
    zero = UnitRows(torch.zeros(2, 3), CPU)  # as F.normalize: a zero row stays zero
    assert zero.load(slice(0, 2), out[:, :3]) == 2 and (out[:2, :3] == 0).all()


def test_exact_matmuls_turn_tf32_off_inside_and_restore_it():
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        with exact_matmuls():
            assert torch.get_float32_matmul_precision() == "highest"
            assert not torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(before)


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


# ---------------------------------------------------------------- memory, measured


def peak_allocated_bytes(fn) -> int:
    """Peak of the bytes allocated by tensors while ``fn()`` runs, beyond those alive before,
    from the profiler's record of every allocation and free."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    assert events, "the profiler recorded no allocation"
    live = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    return peak


def test_peak_memory_stays_within_the_documented_bound():
    # the bound of retrieval_recall's docstring: max_chunk_bytes for a tile and its work
    # buffer, the tile's rows of embeddings (4 D bytes each, and as much again while they
    # load), about 100 bytes per item and per text; on every path
    n, m, dim, budget = 1000, 3000, 32, 2 * 2**20
    items, texts, _ = random_problem(n_items=n, dim=dim, seed=3, noise=1.0)
    texts, owner = texts[:m], torch.arange(m) % n
    rows, cols = tile_shape(n, m, max_chunk_bytes=budget, device=CPU)
    bound = budget + 2 * 4 * dim * (rows + cols) + 100 * (n + m)
    calls = {
        "fp32": lambda: retrieval_recall(items, texts, owner, max_chunk_bytes=budget),
        "fp32, texts grouped by item": lambda: retrieval_recall(items, texts[grouped], owner[grouped],
                                                                max_chunk_bytes=budget),
        "fp32 from float16": lambda: retrieval_recall(items16, texts16, owner, max_chunk_bytes=budget),
        "fp16": lambda: retrieval_recall(items, texts, owner, max_chunk_bytes=budget, precision="fp16"),
        "rerank": lambda: retrieval_recall(items, texts, owner, max_chunk_bytes=budget, rerank_k=16,
                                           rerank_batch=n, rerank=lambda q, c, d: torch.zeros(c.shape)),
    }
    items16, texts16 = items.half(), texts.half()  # converted before measuring
    grouped = torch.argsort(owner, stable=True)

    peaks = {name: peak_allocated_bytes(call) for name, call in calls.items()}

    assert all(budget / 2 < peak <= bound for peak in peaks.values()), (peaks, bound)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_row_that_is_not_finite_is_named(bad):
    """NaN or infinite embeddings give NaN scores, whose ranks nothing defines: every entry point
    of the tiles refuses them, naming the side and the row."""
    from vlr_plugins.eval import mine_hard_negatives
    from vlr_plugins.eval.renorm import QueryBankNorm

    g = torch.Generator().manual_seed(0)
    items, texts, owner = torch.randn(6, 4, generator=g), torch.randn(30, 4, generator=g), torch.arange(30) // 5
    texts[7, 2] = bad
    with pytest.raises(ValueError, match="text_emb: row 7 of 30 is not finite"):
        retrieval_recall(items, texts, owner)
    texts[7, 2] = 0.5
    items[4, 0] = bad
    with pytest.raises(ValueError, match="item_emb: row 4 of 6 is not finite"):
        retrieval_recall(items, texts, owner)
    items[4, 0] = 0.5
    bank = torch.randn(12, 4, generator=g)
    bank[11, 3] = bad
    with pytest.raises(ValueError, match="the query bank: row 11 of 12 is not finite"):
        retrieval_recall(items, texts, owner, renorm=QueryBankNorm(text_bank=bank))
    queries = texts.clone()
    queries[2, 1] = bad
    with pytest.raises(ValueError, match="query_emb: row 2 of 30 is not finite"):
        mine_hard_negatives(queries, items, owner[:, None].tolist(), k=2)
    assert retrieval_recall(items, texts, owner) == retrieval_recall(items, texts, owner)  # finite: fine


def test_the_engine_s_tiles_are_wide_and_the_statistics_passes_square():
    budget = 2**40
    for kind, aspect in ((ENGINE, 8), (STATISTICS, 1)):
        elems = tile_budget(max_chunk_bytes=budget, device=CPU, threads=1, scores=COCO_TRAIN[0] * COCO_TRAIN[1],
                            kind=kind)
        rows, cols = tile_shape(*COCO_TRAIN, max_chunk_bytes=budget, device=CPU, threads=1, kind=kind)
        assert abs(cols / rows - aspect) <= 0.05 * aspect, (kind, rows, cols)
        assert 0.95 * elems <= rows * cols <= elems
