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


def test_auto_loads_the_loops_once_the_process_has_counted_enough_to_repay_them(tmp_path):
    """The rent-or-buy rule: calls too small to repay the loading each, but together enough."""
    pytest.importorskip("numba")
    env = {**os.environ, "PYTHONPATH": str(SRC), "VLR_CPU_BLAS": "torch", "VLR_CACHE_DIR": str(tmp_path)}
    env.pop("VLR_COUNT_KERNEL", None)
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    seen, same = json.loads(out.stdout)
    assert seen[:2] == [[False, False], [False, False]], "loaded before the counting repaid it"
    assert seen[2:] == [[True, True], [True, True]] and same


_MEASURED_CHILD = """
import json, sys
from vlr_plugins.eval import _count_kernels
saving = json.loads(sys.argv[1])
seen = [_count_kernels.prepare(int(scores), threads=1, saving=lambda: saving) for scores in sys.argv[2:]]
print(json.dumps(seen + ["numba" in sys.modules]))
"""


@pytest.mark.parametrize("saving, calls, expected", [
    ((1e-9, 0.5), (4e8, 2e8), [False, True, True]),  # break-even 5e8: the second call's counting reaches it
    ((-1e-10, 0.5), (2**40,), [False, False]),  # measured no faster: never, however large
    # below 2^24 scores counted the measurement is not read (the cache file), from there it rules
    ((1.0, 0.5), (2**23, 2**23), [False, True, True]),
])
def test_auto_weighs_the_machines_measured_saving(saving, calls, expected):
    pytest.importorskip("numba")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("VLR_COUNT_KERNEL", None)
    out = subprocess.run([sys.executable, "-c", _MEASURED_CHILD, json.dumps(saving), *(str(int(c)) for c in calls)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == expected


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
