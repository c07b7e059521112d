"""The bad-input catalogue of ``vlr calibrate``: contradicting options and CPU settings that leave
nothing to measure or are not understood. Each must exit 2 with one ``error:`` line naming what is
wrong (``_refusal.assert_refused``), measure nothing and write no cache file."""

from __future__ import annotations

import pytest
from _refusal import assert_refused, tree

CASES = [
    # (argv, environment, what the message names)
    (["--again", "--show"], {}, ["--again", "--show"]),
    ([], {"VLR_CPU_TILE_ELEMS": "4096"}, ["VLR_CPU_TILE_ELEMS='4096'", "none to measure"]),
    (["--again"], {"VLR_CPU_TILE_ELEMS": "l2"}, ["VLR_CPU_TILE_ELEMS='l2'", "--show"]),
    ([], {"VLR_CPU_TILE_ELEMS": "big"}, ["VLR_CPU_TILE_ELEMS='big'", "expected auto, l2 or a number"]),
    (["--show"], {"VLR_CPU_BLAS": "mkl"}, ["VLR_CPU_BLAS='mkl'", "expected one of torch, numpy, onednn, auto"]),
    ([], {"VLR_COUNT_KERNEL": "cython"}, ["VLR_COUNT_KERNEL='cython'", "expected one of numba, torch, auto"]),
    (["--rounds", "3"], {}, ["--rounds"]),
]


@pytest.mark.parametrize(("argv", "env", "where"), CASES, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_calibrate_refuses_bad_input(argv, env, where, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("VLR_CACHE_DIR", str(cache))
    for name in ("VLR_CPU_BLAS", "VLR_CPU_TILE_ELEMS", "VLR_COUNT_KERNEL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    before = tree(tmp_path)
    assert_refused(["calibrate", *argv], *where, leaves=[cache / "cpu-blas.json"], cwd=tmp_path)
    assert tree(tmp_path) == before, "the folder changed"
