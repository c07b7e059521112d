"""``vlr calibrate``: measures what this machine's cache entry lacks (and nothing more), ``--again``
measures anew, ``--show`` measures nothing; what it prints is what the cache file keeps."""

from __future__ import annotations

import json
import os

import pytest
from _refusal import run_vlr

from vlr_plugins.eval import _count_kernels, _cpu_blas, _tile_calibration

#: a calibration small enough for a test (the real one: 2,048 x 10,240 x 256, 3 rounds)
TINY = {"_SHAPE": (64, 320, 16), "_ROUNDS": 1, "CANDIDATES": (2**12, 2**13, 2**14)}


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("VLR_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("VLR_CPU_BLAS", "torch")
    monkeypatch.setenv("VLR_COUNT_KERNEL", "torch")
    monkeypatch.delenv("VLR_CPU_TILE_ELEMS", raising=False)
    for name, value in TINY.items():
        monkeypatch.setattr(_tile_calibration, name, value)
    measured = []
    measure = _tile_calibration.measure
    monkeypatch.setattr(_tile_calibration, "measure",
                        lambda work, *a, **k: measured.append(work.__name__) or measure(work, *a, **k))
    _tile_calibration.forget_machine()
    yield tmp_path / "cpu-blas.json", measured
    _tile_calibration.forget_machine()


def _entry(path) -> dict:
    return json.loads(path.read_text())[_cpu_blas._machine_key()]


def test_show_measures_nothing(cache):
    path, measured = cache
    code, out, err = run_vlr(["calibrate", "--show"])
    assert code == 0, err
    assert "nothing measured on this machine yet" in out and str(path) in out
    assert not path.exists() and not measured


def test_calibrate_measures_what_is_missing_once_and_shows_what_is_kept(cache):
    path, measured = cache
    code, out, err = run_vlr(["calibrate"])
    assert code == 0, err
    assert measured == ["retrieval_recall", "_statistics_work"]  # the engine's share, then the statistics passes'
    entry = _entry(path)
    # the entry keeps the measured choice (what auto would take: the BLASes may tie on this
    # machine), the shares those of the BLAS VLR_CPU_BLAS fixes
    assert entry["choice"] in ("torch", "numpy", "onednn") and set(entry["tile_elems"]) == {"torch", "torch:statistics"}
    for variant, record in entry["tile_elems"].items():
        assert record["elems"] in TINY["CANDIDATES"] or record["elems"] == record["l2_share"]
        line = next(line for line in out.splitlines() if line.split()[:1] == [variant])
        assert f"{record['elems']:,}" in line, line
        for share, seconds in record["seconds_per_score"].items():
            assert f"2^{int(share).bit_length() - 1} {seconds * 1e9:.2f}" in line, line
    assert "tile BLAS: torch (" in out  # the one in force
    assert f"VLR_CPU_BLAS=torch, auto would take {entry['choice']})" in out
    # kept: shown again, measured no more; --json prints the file's entry itself
    code, out, err = run_vlr(["calibrate", "--json"])
    assert code == 0, err
    shown = json.loads(out)
    assert shown["entry"] == _entry(path) and shown["cache"] == str(path)
    assert shown["machine"] == _cpu_blas._machine_key()
    assert measured == ["retrieval_recall", "_statistics_work"]


def test_again_forgets_the_machine_and_measures_anew(cache):
    path, measured = cache
    assert run_vlr(["calibrate"])[0] == 0
    data = json.loads(path.read_text())
    data[_cpu_blas._machine_key()]["tile_elems"]["torch"]["elems"] = 12345  # one no calibration could keep
    data["another machine"] = {"choice": "numpy"}
    path.write_text(json.dumps(data))
    _tile_calibration._known.clear()
    code, out, _ = run_vlr(["calibrate"])
    assert code == 0 and "12,345" in out and len(measured) == 2  # kept: not measured again
    code, out, err = run_vlr(["calibrate", "--again"])
    assert code == 0, err
    assert len(measured) == 4 and "12,345" not in out
    assert _entry(path)["tile_elems"]["torch"]["elems"] != 12345
    assert json.loads(path.read_text())["another machine"] == {"choice": "numpy"}  # only this machine forgotten


def test_auto_measures_both_countings_where_numba_is_installed(cache, monkeypatch):
    pytest.importorskip("numba")
    path, measured = cache
    monkeypatch.setenv("VLR_COUNT_KERNEL", "auto")
    code, out, err = run_vlr(["calibrate"])
    assert code == 0, err
    assert set(_entry(path)["tile_elems"]) == {"torch", "torch+numba", "torch:statistics"}
    assert "numba's counting loops: save" in out and _count_kernels.load_seconds() is not None
    assert os.environ["VLR_COUNT_KERNEL"] == "auto"  # the command's own setting restored
