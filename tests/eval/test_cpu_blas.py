"""The BLAS of the engine's CPU tile products (:mod:`vlr_plugins.eval._cpu_blas`): torch's,
numpy's or oneDNN's, chosen once per machine by measuring each; the product itself checked
against a float64 reference, equal inputs scored equally anywhere in a product under each, the
choice's cache and override, and the BLAS threads limited inside the engine's workers."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import torch

from vlr_plugins.errors import ConfigError
from vlr_plugins.eval import _cpu_blas
from vlr_plugins.eval._cpu_blas import blas_threads, choice, tile_product
from vlr_plugins.eval._tile_workers import one_thread_per_worker


# the last shape: 2 x 3 of oneDNN's small blocks (_cpu_blas._ONEDNN_BLOCK), with tails
@pytest.mark.parametrize("small_temporaries", [False, True])
@pytest.mark.parametrize("rows,cols,dim", [(1, 1, 3), (7, 130, 16), (257, 65, 256), (300, 700, 32)])
def test_the_product_into_views_of_a_buffer(cpu_blas, rows, cols, dim, small_temporaries):
    g = torch.Generator().manual_seed(rows)
    a, b = torch.randn(rows, dim, generator=g), torch.randn(cols + 5, dim, generator=g)
    buffer = torch.full((rows, cols + 9), 7.0)
    out = buffer[:, 2:2 + cols]  # a view with gaps between its rows
    assert tile_product(a, b[:cols], out, small_temporaries=small_temporaries) is out
    torch.testing.assert_close(out.double(), a.double() @ b[:cols].double().T, rtol=1e-5, atol=1e-5)
    assert bool((buffer[:, :2] == 7).all() and (buffer[:, 2 + cols:] == 7).all()), "wrote outside the view"


@pytest.mark.parametrize("name", ["numpy", "onednn"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_stays_with_torch(monkeypatch, dtype, name):
    monkeypatch.setenv("VLR_CPU_BLAS", name)
    a, b = torch.randn(4, 8).to(dtype), torch.randn(5, 8).to(dtype)
    out = torch.empty(4, 5, dtype=dtype)
    torch.testing.assert_close(tile_product(a, b, out), a @ b.T)


@pytest.mark.parametrize("threads", [1, 2])
def test_equal_rows_and_columns_get_equal_scores_anywhere_in_a_product(cpu_blas, threads):
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(300, 256, generator=g), torch.randn(700, 256, generator=g)
    a, b = torch.cat([a, torch.randn(800, 256, generator=g)]), torch.cat([b, torch.randn(1600, 256, generator=g)])
    a[::37] = a[5].clone()
    b[::41] = b[3].clone()
    with blas_threads(threads):  # tails, and whole tiles as large as the engine's
        for r, c in [(300, 700), (129, 700), (300, 77), (1, 700), (300, 1), (1100, 2300), (723, 1137)]:
            for small in (False, True):
                out = tile_product(a[:r], b[:c], torch.empty(r, c), small_temporaries=small)
                block = out[::37, ::41]
                assert bool((block == block.flatten()[0]).all()), (r, c, small)


def test_the_override_and_a_bad_value(monkeypatch):
    others = ("numpy", "NumPy ", "onednn", "oneDNN")
    names = ["torch", " Torch", *(n for n in others if _cpu_blas.eligible(n.strip().lower()))]
    for name in names:
        monkeypatch.setenv("VLR_CPU_BLAS", name)
        assert choice() == name.strip().lower()
    monkeypatch.setenv("VLR_CPU_BLAS", "mkl")
    with pytest.raises(ConfigError, match="VLR_CPU_BLAS='mkl': expected one of torch, numpy, onednn, auto"):
        choice()


def _own_product(name: str, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b.T`` in the library's own call: numpy's matmul, oneDNN's fp32 linear op."""
    if name == "numpy":
        return torch.from_numpy(np.matmul(a.numpy(), b.numpy().T))
    return torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], "")


def _given(name: str, rows: int, cols: int) -> bool:
    """Whether the engine gives ``name``'s BLAS a ``rows`` x ``cols`` product (the documented rule):
    at least 2 x 8 (smaller ones are padded and torch's), numpy's at least 128 x 128."""
    return rows >= 2 and cols >= 8 and (name != "numpy" or min(rows, cols) >= 128)


def _keeps_equal_rows_equal(name: str) -> bool:
    """The property, checked here with the library's own call: duplicated rows and columns at
    strided positions of the products with and without tails that the engine gives it, on one
    thread and two, for two sets of values (whether a BLAS breaks it depends on them)."""
    for seed in (11, 12):
        g = torch.Generator().manual_seed(seed)
        a, b = torch.randn(260, 256, generator=g), torch.randn(650, 256, generator=g)
        a, b = torch.cat([a, torch.randn(780, 256, generator=g)]), torch.cat([b, torch.randn(1550, 256, generator=g)])
        a[::29] = a[4].clone()
        b[::43] = b[2].clone()
        for threads in (1, 2):
            with blas_threads(threads):
                for r, c in [(260, 650), (128, 650), (260, 131), (97, 650), (260, 61), (1, 650), (260, 1),
                             (1040, 2200), (611, 1203)]:
                    if not _given(name, r, c):
                        continue
                    block = _own_product(name, a[:r], b[:c])[::29, ::43]
                    if not bool((block == block.flatten()[0]).all()):
                        return False
    return True


def _runs(name: str) -> bool:
    if name == "numpy":
        return True
    try:
        one = torch.ones(1, 2)
        return bool(torch.backends.mkldnn.is_available()) and _own_product(name, one, one).item() == 2
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


@pytest.mark.parametrize("name", ["numpy", "onednn"])
def test_a_product_is_eligible_only_where_it_scores_equal_rows_equally(monkeypatch, tmp_path, name):
    monkeypatch.setenv("VLR_CACHE_DIR", str(tmp_path))
    _cpu_blas._machine_entry.cache_clear()
    try:
        assert _cpu_blas.eligible(name) == (_runs(name) and _keeps_equal_rows_equal(name))
        monkeypatch.setenv("VLR_CPU_BLAS", name)
        if _cpu_blas.eligible(name):
            assert choice() == name
        else:  # this CPU (or build): never taken, and refused when asked for
            why = "different scores" if _runs(name) else "not in this torch build"
            with pytest.raises(ConfigError, match=f"VLR_CPU_BLAS={name}: .*{why}"):
                choice()
            monkeypatch.setenv("VLR_CPU_BLAS", "auto")
            assert choice() != name
    finally:
        _cpu_blas._machine_entry.cache_clear()


@pytest.mark.parametrize("rows,cols", [(127, 700), (700, 127), (1, 700), (700, 7), (128, 128)])
def test_numpys_blas_gets_no_product_smaller_than_it_is_probed_at(monkeypatch, rows, cols):
    """Below 128 rows or columns numpy's OpenBLAS takes its small-matrix kernels (equal rows got
    different bits on a Xeon): those products are torch's, and numpy's are only the ones probed."""
    if not _cpu_blas.eligible("numpy"):
        pytest.skip("numpy's BLAS is not eligible on this CPU")
    monkeypatch.setenv("VLR_CPU_BLAS", "numpy")
    given, matmul = [], np.matmul

    def watched(x, y, **kwargs):  # numpy's own product, its shapes noted
        given.append((x.shape[0], y.shape[1]))
        return matmul(x, y, **kwargs)

    monkeypatch.setattr(np, "matmul", watched)
    g = torch.Generator().manual_seed(rows + cols)
    a, b = torch.randn(rows, 256, generator=g), torch.randn(cols, 256, generator=g)
    got = tile_product(a, b, torch.empty(rows, cols))
    monkeypatch.undo()
    assert given == ([(rows, cols)] if _given("numpy", rows, cols) else [])
    torch.testing.assert_close(got.double(), a.double() @ b.double().T, rtol=1e-5, atol=1e-4)


def test_measured_once_per_machine_and_kept(monkeypatch, tmp_path):
    monkeypatch.setenv("VLR_CPU_BLAS", "auto")
    monkeypatch.setenv("VLR_CACHE_DIR", str(tmp_path))
    _cpu_blas._machine_entry.cache_clear()
    try:
        picked = choice()
        cache = tmp_path / "cpu-blas.json"
        entry = json.loads(cache.read_text())[_cpu_blas._machine_key()]
        assert entry["choice"] == picked
        seconds, ok = entry["seconds"], entry["eligible"]
        assert set(seconds) == {"torch", "numpy", *(["onednn"] if _runs("onednn") else [])}
        assert all(v > 0 for v in seconds.values())
        assert ok == {name: name in seconds and _keeps_equal_rows_equal(name) for name in ("numpy", "onednn")}
        faster = [n for n in ok if ok[n] and seconds[n] < _cpu_blas._MARGIN * seconds["torch"]]
        assert picked == min(faster, key=seconds.__getitem__, default="torch")
        left = [p.name for p in tmp_path.iterdir() if p.name not in ("cpu-blas.json", "cpu-blas.json.lock")]
        assert not left, "a temporary file was left"
        # a later process reads the answer rather than measuring again
        other = "torch" if picked != "torch" else "numpy"
        cache.write_text(json.dumps({_cpu_blas._machine_key(): {
            "choice": other, "eligible": {"numpy": True, "onednn": True}, "probe": _cpu_blas._PROBE_VERSION}}))
        _cpu_blas._machine_entry.cache_clear()
        assert choice() == other
        # entries without the probes' answers (written before the probe, or before oneDNN's
        # product was a choice), or probed by older checks, are measured again
        for old in ({"choice": "numpy"}, {"choice": "numpy", "invariant": True},
                    {"choice": other, "eligible": {"numpy": True, "onednn": True}}):
            cache.write_text(json.dumps({_cpu_blas._machine_key(): old}))
            _cpu_blas._machine_entry.cache_clear()
            again = choice()
            entry = json.loads(cache.read_text())[_cpu_blas._machine_key()]
            assert entry["eligible"] == ok and entry["choice"] == again
            # measured again (not the old entry's answer): new times, chosen by the same rule
            # (where two BLASes run alike, a second measurement may pick the other)
            assert set(entry["seconds"]) == set(seconds) and all(v > 0 for v in entry["seconds"].values())
            faster = [n for n in ok if ok[n] and entry["seconds"][n] < _cpu_blas._MARGIN * entry["seconds"]["torch"]]
            assert again == min(faster, key=entry["seconds"].__getitem__, default="torch")
        # an unreadable cache is measured again and rewritten
        cache.write_text("{not json")
        _cpu_blas._machine_entry.cache_clear()
        assert choice() in ("torch", "numpy", "onednn")
        assert _cpu_blas._machine_key() in json.loads(cache.read_text())
    finally:
        _cpu_blas._machine_entry.cache_clear()


def test_an_unwritable_cache_still_answers(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("VLR_CPU_BLAS", "auto")
    monkeypatch.setenv("VLR_CACHE_DIR", str(blocker / "sub"))  # a directory under a file
    _cpu_blas._machine_entry.cache_clear()
    try:
        assert choice() in ("torch", "numpy", "onednn")
    finally:
        _cpu_blas._machine_entry.cache_clear()


def test_the_workers_blas_threads_are_limited_and_restored():
    from threadpoolctl import threadpool_info

    def blas_counts():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    torch_before, blas_before = torch.get_num_threads(), blas_counts()
    with one_thread_per_worker(2):
        assert torch.get_num_threads() == 1
        assert blas_counts() and all(n == 1 for n in blas_counts())
    assert torch.get_num_threads() == torch_before and blas_counts() == blas_before


def test_products_of_two_threads_at_once(cpu_blas):
    """numpy and torch release the GIL in their products: two worker threads' products are
    correct when they run at once (each into its own buffer)."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(2, 200, 64, generator=g), torch.randn(2, 300, 64, generator=g)
    outs = [torch.empty(200, 300) for _ in range(2)]
    errors = []

    def work(i):
        try:
            for _ in range(20):
                tile_product(a[i], b[i], outs[i])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    with one_thread_per_worker(2):
        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        [t.start() for t in threads]
        [t.join() for t in threads]
    assert not errors
    for i in range(2):
        np.testing.assert_allclose(outs[i].numpy(), (a[i].double() @ b[i].double().T).numpy(), rtol=1e-5, atol=1e-5)


_LATE_BLAS = r"""
import importlib, json, sys
from threadpoolctl import threadpool_info
from vlr_plugins.eval._cpu_blas import blas_threads

def blas():
    return {i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}

with blas_threads(1):  # the view of the loaded libraries is taken here
    pass
before = blas()
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError:
        continue
    if set(blas()) - set(before):
        break
with blas_threads(1):
    inside = blas()
print(json.dumps({"new": sorted(set(inside) - set(before)), "inside": inside, "after": blas(), "before": before}))
"""


def test_a_blas_loaded_after_the_first_limit_is_limited_too():
    """The view of the loaded BLAS libraries is kept between limits (finding them costs ~1.5 ms):
    a library that an import loads later (scipy's, faiss') is limited by the next one all the same."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _LATE_BLAS, "faiss", "scipy.linalg", "sklearn"],
                         capture_output=True, text=True, check=True).stdout
    seen = json.loads(out)
    if not seen["new"]:
        pytest.skip("none of faiss, scipy and scikit-learn is installed with a BLAS of its own")
    assert all(n == 1 for n in seen["inside"].values()), seen
    assert {k: v for k, v in seen["after"].items() if k in seen["before"]} == seen["before"], seen
