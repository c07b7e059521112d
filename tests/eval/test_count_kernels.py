"""numba's counting loops (``vlr_plugins.eval._count_kernels``): the counts of the plain formula
``compare(scores, thresholds).sum(dim)`` for every tile layout the engine passes them, torch's
path where a tile is not theirs, loaded under ``auto`` only once the process's counting repays the
loading (the machine's measured saving, else a conservative constant), and
``VLR_COUNT_KERNEL`` checked. The engine's results under them are checked against the full-matrix
references by every test taking the ``cpu_blas`` fixture (its ``numba-count`` run)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vlr_plugins.errors import ConfigError
from vlr_plugins.eval import _count_kernels
from vlr_plugins.eval._tiles import count_above

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def numba_loops(monkeypatch):
    pytest.importorskip("numba")
    monkeypatch.setenv("VLR_COUNT_KERNEL", "numba")


def _tile(rows: int, cols: int, layout: str, seed: int) -> torch.Tensor:
    """Scores from a few values (ties everywhere), as the engine's tiles sit in their buffers."""
    g = torch.Generator().manual_seed(seed)
    values = lambda *shape: torch.randint(-3, 4, shape, generator=g).float() / 4  # noqa: E731
    if layout == "contiguous":
        return values(rows, cols)
    if layout == "padded":  # a tile's valid rows x columns of a larger buffer (grouped_ranks' rows of 16)
        return values(rows + 3, cols + 5)[1:rows + 1, :cols]
    assert layout == "flat"  # a tile whose rows are the buffer's (pair_ranks' picked rows)
    return values(rows * cols).view(rows, cols)


@pytest.mark.parametrize("layout", ["contiguous", "padded", "flat"])
@pytest.mark.parametrize("rows, cols", [(7, 19), (1, 33), (40, 1), (16, 64)])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("compare", [torch.gt, torch.eq])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_loop_counts_as_the_formula(numba_loops, layout, rows, cols, dim, compare, dtype):
    scores = _tile(rows, cols, layout, seed=rows * cols + dim)
    g = torch.Generator().manual_seed(1)
    n = cols if dim == 0 else rows
    thresholds = torch.randint(-3, 4, (n,), generator=g).float() / 4
    thresholds = thresholds if dim == 0 else thresholds[:, None]
    start = torch.randint(0, 1000, (n,), generator=g).to(dtype)
    counts = start.clone()

    assert _count_kernels.count(scores, thresholds, dim, counts, compare) is True

    assert torch.equal(counts, start + compare(scores, thresholds).sum(dim).to(dtype))


def test_count_above_is_the_same_either_way(monkeypatch):
    pytest.importorskip("numba")
    scores = _tile(9, 21, "padded", seed=3)
    thresholds = scores[:, 4:5].clone()  # each row's own value: ties on every row
    work, ones = torch.empty(9, 21), torch.ones(21)
    got = {}
    for kernel in ("torch", "numba"):
        monkeypatch.setenv("VLR_COUNT_KERNEL", kernel)
        for compare in (torch.gt, torch.eq):
            counts = torch.zeros(9)
            count_above(scores, thresholds, work, 1, counts, ones, compare=compare)
            got[kernel, compare] = counts
    for compare in (torch.gt, torch.eq):
        assert torch.equal(got["torch", compare], got["numba", compare])
        assert torch.equal(got["numba", compare], compare(scores, thresholds).sum(1).float())


def test_tiles_that_are_not_the_loops_are_left_to_torch(numba_loops):
    scores, thresholds, counts = torch.rand(6, 10), torch.rand(10), torch.zeros(10)
    for args in ((scores.half(), thresholds, 0, counts, torch.gt),  # a reduced-precision tile
                 (scores.T.contiguous().T, thresholds, 0, counts, torch.gt),  # columns not contiguous
                 (scores, thresholds.double(), 0, counts, torch.gt),
                 (scores, thresholds, 0, torch.zeros(20)[::2], torch.gt),  # counts not contiguous
                 (scores, thresholds, 0, counts.long(), torch.gt),
                 (scores, thresholds, 0, counts, torch.ge)):  # a comparison the loops do not make
        assert _count_kernels.count(*args) is False
    assert counts.eq(0).all()
    work, ones = torch.empty(6, 10), torch.ones(10)
    count_above(scores.T.contiguous().T, thresholds, work, 0, counts, ones)  # torch's path, same counts
    assert torch.equal(counts, (scores > thresholds).sum(0).float())



# the tile counters of the re-normalisations' grouped pass: whole arrays over 23 items x 70 texts,
# one tile (items 5..16 x texts 20..56) counted at once against the engine's own torch steps a
# channel at a time; thresholds are keys of the tile itself, so that every comparison meets exact
# ties and a key one ulp off would change a count
_N, _M, _ITEMS, _TEXTS = 23, 70, (5, 17), (20, 57)


def _cosines(rows: int, cols: int, seed: int, layout: str = "contiguous") -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    values = torch.randint(-40, 41, (rows + 3, cols + 9), generator=g).float() / 50
    return values[1:rows + 1, 2:cols + 2] if layout == "padded" else values[:rows, :cols].contiguous()


def _thresholds(keys: torch.Tensor, dim: int, n: int, offset: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(n,) thresholds of whole arrays whose tile part are keys of ``keys`` (one per column,
    ``dim`` 0, or per row), and the next floats below them."""
    g = torch.Generator().manual_seed(seed)
    threshold = torch.randn(n, generator=g)
    picks = torch.randint(0, keys.shape[dim], (keys.shape[1 - dim],), generator=g)
    tile = keys[picks, torch.arange(keys.shape[1])] if dim == 0 else keys[torch.arange(keys.shape[0]), picks]
    threshold[offset:offset + len(tile)] = tile
    return threshold, torch.nextafter(threshold, torch.tensor(-math.inf))


def _start(n: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randint(0, 100, (n,), generator=torch.Generator().manual_seed(seed)).to(dtype)


@pytest.mark.parametrize("layout, dtype", [("contiguous", torch.float32), ("padded", torch.float32),
                                           ("padded", torch.float64)])  # float64: counts of galleries >= 2^24
@pytest.mark.parametrize("before", [True, False])
def test_the_dual_softmax_counter_counts_as_the_engines_torch_steps(numba_loops, monkeypatch, layout, dtype, before):
    from vlr_plugins.eval.renorm_keys import DualSoftmaxKeys, with_slack

    (a0, a1), (t0, t1) = _ITEMS, _TEXTS
    full = _cosines(_N, _M, seed=1)
    tau2 = 30.0 / math.log(2.0)
    keys = DualSoftmaxKeys(30.0, torch.logsumexp(full * tau2 * math.log(2.0), 1) / math.log(2.0),
                           torch.logsumexp(full * tau2 * math.log(2.0), 0) / math.log(2.0))
    assert keys.shift is not None  # factored: the counter's case
    scores = _cosines(a1 - a0, t1 - t0, seed=2, layout=layout)
    monkeypatch.setenv("VLR_COUNT_KERNEL", "torch")  # the reference: the engine's steps in torch
    spare, tile = with_slack(*scores.shape), scores.clone()  # one tile's keys, as the grouped pass makes them
    t2i = keys.t2i_tile(tile, _ITEMS, _TEXTS, spare, None).clone()
    i2t = keys.i2t_tile(tile, _ITEMS, _TEXTS, spare, None).clone()
    cols = (*_thresholds(t2i, 0, _M, t0, seed=3), _start(_M, 4, dtype))
    rows = (*_thresholds(i2t, 1, _N, a0, seed=5), _start(_N, 6, dtype))
    expected_cols, expected_rows = cols[2].clone(), rows[2].clone()
    expected_cols[t0:t1] += (t2i > cols[1 if before else 0][t0:t1]).sum(0).to(dtype)
    expected_rows[a0:a1] += (i2t > rows[0 if before else 1][a0:a1, None]).sum(1).to(dtype)
    monkeypatch.setenv("VLR_COUNT_KERNEL", "numba")

    counter = keys.tile_counter([cols], [rows], {})
    assert counter is not None
    assert counter(scores, with_slack(*scores.shape), a0, t0, before) is True

    assert torch.equal(cols[2], expected_cols)
    assert torch.equal(rows[2], expected_rows)
    assert keys.tile_counter([cols], [rows], {"t2i": (torch.zeros(_M), torch.zeros(_M, dtype=torch.long))}) is None


def _running_best(n: int, offset: int, tile_best: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Running bests of whole arrays: below, equal to (ties, with the best before or after the
    tile) and above the tile's own maxima."""
    g = torch.Generator().manual_seed(seed)
    best, index = torch.randn(n, generator=g), torch.randint(0, 200, (n,), generator=g)
    case = torch.arange(len(tile_best)) % 4
    best[offset:offset + len(tile_best)] = torch.where(case == 0, tile_best - 0.5,
                                                       torch.where(case == 3, tile_best + 0.5, tile_best))
    return best, index


@pytest.mark.parametrize("banks, dtype", [("texts", torch.float32), ("items", torch.float32), ("both", torch.float32),
                                          ("both", torch.float64),  # float64: counts of galleries >= 2^24
                                          ("none", torch.float32)])  # the plain engine's raw_counter
@pytest.mark.parametrize("before", [True, False])
def test_the_query_bank_counter_counts_and_tracks_as_the_engines_torch_steps(numba_loops, monkeypatch, banks, dtype,
                                                                            before):
    from vlr_plugins.eval.renorm_keys import QueryBankChoice
    from vlr_plugins.eval.renorm_pass import update_best

    (a0, a1), (t0, t1) = _ITEMS, _TEXTS
    g = torch.Generator().manual_seed(7)
    bank_of = {"t2i": (torch.randn(_N, generator=g) * 3, torch.rand(_N, generator=g) > 0.5),
               "i2t": (torch.randn(_M, generator=g) * 3, torch.rand(_M, generator=g) > 0.5)}
    choice = QueryBankChoice(20.0, bank_of["t2i"] if banks in ("texts", "both") else None,
                             bank_of["i2t"] if banks in ("items", "both") else None)
    scores = _cosines(a1 - a0, t1 - t0, seed=8, layout="padded")
    monkeypatch.setenv("VLR_COUNT_KERNEL", "torch")  # the reference: the engine's steps in torch
    channels, expected, top1, expected_top1 = {}, {}, {}, {}
    for d, dim, n, q0, q1, g0 in (("t2i", 0, _M, t0, t1, a0), ("i2t", 1, _N, a0, a1, t0)):
        channels[d], expected[d] = [], []
        for k, alternative in enumerate(choice.alternatives(d)):
            spare = torch.empty_like(scores)
            keys = scores if alternative is None else getattr(alternative, f"{d}_tile")(scores, _ITEMS, _TEXTS, spare, None)
            at, down = _thresholds(keys, dim, n, q0, seed=10 * dim + k)
            start = _start(n, seed=20 + 10 * dim + k, dtype=dtype)
            used = (down if before else at) if d == "t2i" else (at if before else down)
            total = start.clone()
            total[q0:q1] += (keys > (used[q0:q1] if dim == 0 else used[q0:q1, None])).sum(dim).to(dtype)
            channels[d].append((at, down, start))
            expected[d].append(total)
        if len(channels[d]) > 1:
            top1[d] = _running_best(n, q0, scores.amax(dim), seed=30 + dim)
            best, index = (x.clone() for x in top1[d])
            update_best(scores, dim, g0, best[q0:q1], index[q0:q1], torch.empty_like(scores),
                        torch.arange(1, 200, dtype=torch.float32))
            expected_top1[d] = (best, index)
    monkeypatch.setenv("VLR_COUNT_KERNEL", "numba")

    counter = (choice.tile_counter(channels["t2i"], channels["i2t"], top1) if banks != "none"
               else _count_kernels.raw_counter(channels["t2i"], channels["i2t"]))
    assert counter is not None
    assert counter(scores, None, a0, t0, before) is True

    for d in ("t2i", "i2t"):
        for (_, _, counts), total in zip(channels[d], expected[d]):
            assert torch.equal(counts, total), d
    for d, (best, index) in expected_top1.items():
        assert torch.equal(top1[d][0], best) and torch.equal(top1[d][1], index), d
    assert set(top1) == {"texts": {"t2i"}, "items": {"i2t"}, "both": {"t2i", "i2t"}, "none": set()}[banks]


def test_the_tile_counters_are_not_made_without_the_loops_or_for_arrays_not_theirs(monkeypatch):
    from vlr_plugins.eval.renorm_keys import DualSoftmaxKeys, QueryBankChoice

    monkeypatch.setenv("VLR_COUNT_KERNEL", "torch")
    channel = (torch.zeros(4), torch.zeros(4), torch.zeros(4))
    assert DualSoftmaxKeys(10.0, torch.zeros(4), torch.zeros(4)).tile_counter([channel], [channel], {}) is None
    assert QueryBankChoice(10.0, None, None).tile_counter([channel], [channel], {}) is None
    pytest.importorskip("numba")
    monkeypatch.setenv("VLR_COUNT_KERNEL", "numba")  # loaded, but arrays that are not theirs
    doubles = (torch.zeros(4, dtype=torch.float64),) * 3
    assert DualSoftmaxKeys(10.0, torch.zeros(4), torch.zeros(4)).tile_counter([doubles], [channel], {}) is None
    assert QueryBankChoice(10.0, None, None).tile_counter([channel], [(torch.zeros(8)[::2], *channel[1:])], {}) is None

_CHILD = """
import json, sys, torch
from vlr_plugins.eval import _count_kernels, retrieval_recall
g = torch.Generator().manual_seed(0)
items, texts = torch.randn(40, 8, generator=g), torch.randn(200, 8, generator=g)
owner = torch.arange(200) // 5
# loading pays once the process has counted 20,000 scores: the third of these calls of 8,000
_count_kernels.NUMBA_FROM_PER_THREAD = 20000 / torch.get_num_threads()
seen, results = [], []
for _ in range(4):
    results.append(retrieval_recall(items, texts, owner))
    seen.append(["numba" in sys.modules, _count_kernels.enabled()])
print(json.dumps([seen, all(r == results[0] for r in results)]))
"""


def _child_under_auto(code: str, cache: Path) -> object:
    """What ``code`` prints (JSON), run in a fresh process under ``VLR_COUNT_KERNEL=auto`` with
    an empty cache directory (no measurement of this machine's saving)."""
    pytest.importorskip("numba")
    env = {**os.environ, "PYTHONPATH": str(SRC), "VLR_CPU_BLAS": "torch", "VLR_CACHE_DIR": str(cache)}
    env.pop("VLR_COUNT_KERNEL", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_auto_loads_the_loops_once_the_process_has_counted_enough_to_repay_them(tmp_path):
    """The rent-or-buy rule: calls too small to repay the loading each, but together enough."""
    seen, same = _child_under_auto(_CHILD, tmp_path)
    assert seen[:2] == [[False, False], [False, False]], "loaded before the counting repaid it"
    assert seen[2:] == [[True, True], [True, True]] and same


_RENORM_CHILD = """
import json, torch
from vlr_plugins.eval import _count_kernels, retrieval_recall
from vlr_plugins.eval.renorm import DualSoftmax
g = torch.Generator().manual_seed(0)
items, texts = torch.randn(40, 8, generator=g), torch.randn(200, 8, generator=g)
owner = torch.arange(200) // 5
# loading pays at 24,000 scores counted: a plain call of 8,000 counts 8,000, a re-normalised one
# 32,000 where its scores weigh 4 (a machine whose loops save that much more on its rank pass)
_count_kernels.RENORM_WEIGHT = 4.0
_count_kernels.NUMBA_FROM_PER_THREAD = 3 * 8000 / torch.get_num_threads()
retrieval_recall(items, texts, owner)
plain = _count_kernels.enabled()
retrieval_recall(items, texts, owner, renorm=DualSoftmax(100.0))
print(json.dumps([plain, _count_kernels.enabled()]))
"""


def test_a_re_normalised_evaluation_weighs_more_towards_loading_the_loops(tmp_path):
    """Its rank pass's element-wise steps are the loops' too: its scores weigh RENORM_WEIGHT."""
    assert _child_under_auto(_RENORM_CHILD, tmp_path) == [False, True]


_MEASURED_CHILD = """
import json, sys
from vlr_plugins.eval import _count_kernels
saving, weight = json.loads(sys.argv[1]), float(sys.argv[2])
seen = [_count_kernels.prepare(int(scores), threads=1, saving=lambda: saving, weight=weight) for scores in sys.argv[3:]]
print(json.dumps(seen + ["numba" in sys.modules]))
"""


@pytest.mark.parametrize("saving, weight, calls, expected", [
    ((1e-9, 0.5), 1.0, (4e8, 2e8), [False, True, True]),  # break-even 5e8: the second call's counting reaches it
    # a call's scores weigh ``weight`` (a re-normalised one's RENORM_WEIGHT): at 4 the first call's 4e8 count as 1.6e9
    ((1e-9, 0.5), 4.0, (4e8,), [True, True]),
    ((1e-9, 0.5), 4.0, (1e8, 1e8), [False, True, True]),
    ((-1e-10, 0.5), 1.0, (2**40,), [False, False]),  # measured no faster: never, however large
    # below 2^24 scores counted the measurement is not read (the cache file), from there it rules
    ((1.0, 0.5), 1.0, (2**23, 2**23), [False, True, True]),
])
def test_auto_weighs_the_machines_measured_saving(saving, weight, calls, expected):
    pytest.importorskip("numba")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("VLR_COUNT_KERNEL", None)
    out = subprocess.run([sys.executable, "-c", _MEASURED_CHILD, json.dumps(saving), str(weight),
                          *(str(int(c)) for c in calls)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == expected


_RELOAD_CHILD = """
import json
from vlr_plugins.eval import _count_kernels
assert _count_kernels.prepare(0)
print(json.dumps([_count_kernels.load_seconds(), _count_kernels.reload_seconds()]))
"""


def test_a_load_that_compiled_the_loops_is_not_what_a_later_one_takes(tmp_path):
    """The first process on a machine compiles the loops into numba's cache, and its loading's
    time is no measure of a later process's, which reads them there: it gives none
    (the calibration then keeps none, and the break-even takes LOAD_SECONDS); the later one gives
    its own."""
    pytest.importorskip("numba")
    env = {**os.environ, "PYTHONPATH": str(SRC), "VLR_COUNT_KERNEL": "numba", "NUMBA_CACHE_DIR": str(tmp_path)}
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _RELOAD_CHILD], env=env, capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout))
    (first_load, first_reload), (later_load, later_reload) = runs
    assert first_load > 0 and first_reload is None  # compiled into the empty cache
    assert later_reload == later_load > 0  # read from it
    assert later_load < first_load


def test_break_even_from_the_machines_measurement():
    assert _count_kernels.break_even(None) == _count_kernels.NUMBA_FROM_PER_THREAD
    assert _count_kernels.break_even((4e-10, 0.6)) == pytest.approx(0.6 / 4e-10)
    assert _count_kernels.break_even((4e-10, None)) == pytest.approx(_count_kernels.LOAD_SECONDS / 4e-10)
    for no_faster in (0.0, -1e-10, float("nan")):
        assert _count_kernels.break_even((no_faster, 0.5)) == math.inf


def test_the_setting(monkeypatch):
    for bad in ("fast", "cython"):
        monkeypatch.setenv("VLR_COUNT_KERNEL", bad)
        with pytest.raises(ConfigError, match=f"VLR_COUNT_KERNEL='{bad}': expected one of numba, torch, auto"):
            _count_kernels.setting()
        with pytest.raises(ConfigError, match="VLR_COUNT_KERNEL"):
            _count_kernels.enabled()
    monkeypatch.setenv("VLR_COUNT_KERNEL", "torch")
    assert _count_kernels.prepare(2**60) is False and _count_kernels.enabled() is False
    assert _count_kernels.count(torch.rand(3, 4), torch.rand(4), 0, torch.zeros(4), torch.gt) is False
    monkeypatch.setenv("VLR_COUNT_KERNEL", " Auto ")
    assert _count_kernels.setting() == "auto"


def test_numba_asked_for_where_it_does_not_import():
    child = ("import sys; sys.modules['numba'] = None\n"
             "from vlr_plugins.errors import ConfigError\n"
             "from vlr_plugins.eval import _count_kernels\n"
             "try:\n    _count_kernels.setting()\nexcept ConfigError as e:\n    print(e)\n"
             "import os; os.environ['VLR_COUNT_KERNEL'] = 'auto'\n"
             "print(_count_kernels.prepare(2**60), _count_kernels.enabled())")
    env = {**os.environ, "PYTHONPATH": str(SRC), "VLR_COUNT_KERNEL": "numba"}
    out = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "VLR_COUNT_KERNEL=numba: numba is not installed (pip install 'vlr-plugins[fast]'); use torch or auto",
        "False False"]
