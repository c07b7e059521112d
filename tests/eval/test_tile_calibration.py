"""The CPU tile share: calibrated once per machine and tile BLAS for large work, kept beside the
BLAS choice, read (not measured) by later processes and by processes started at once, the L2
rule's for small work, ``VLR_CPU_TILE_ELEMS`` obeyed; the engine's results the same at any share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from _reference import near_tie_problem, random_problem
from vlr_plugins.errors import ConfigError
from vlr_plugins.eval import _cpu_blas, _tile_calibration, retrieval_recall
from vlr_plugins.eval._tiles import cpu_tile_elems_per_thread, l2_share, tile_budget

SRC = Path(__file__).resolve().parents[2] / "src"
BIG = _tile_calibration.CALIBRATE_FROM
#: a calibration small enough for a test (the real one: 2,048 x 10,240 x 256, 3 rounds)
TINY = {"_SHAPE": (64, 320, 16), "_ROUNDS": 1, "CANDIDATES": (2**12, 2**13, 2**14)}


@pytest.fixture
def fresh_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("VLR_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("VLR_CPU_BLAS", "torch")
    monkeypatch.setenv("VLR_COUNT_KERNEL", "torch")  # the share kept for torch's BLAS counting in torch's ops
    monkeypatch.delenv("VLR_CPU_TILE_ELEMS", raising=False)
    for name, value in TINY.items():
        monkeypatch.setattr(_tile_calibration, name, value)
    _cpu_blas._machine_entry.cache_clear()
    _tile_calibration._known.clear()
    _tile_calibration._savings.clear()
    yield tmp_path / "cpu-blas.json"
    _cpu_blas._machine_entry.cache_clear()
    _tile_calibration._known.clear()
    _tile_calibration._savings.clear()


def test_the_share_kept_is_the_fastest_only_where_it_clearly_beats_the_l2_rule():
    rule = 2**17
    assert _tile_calibration.calibrated(rule, {2**17: 1.0, 2**19: 0.90, 2**21: 0.95}) == 2**19
    assert _tile_calibration.calibrated(rule, {2**17: 1.0, 2**19: 0.98, 2**21: 0.99}) == rule  # within the margin
    assert _tile_calibration.calibrated(rule, {2**17: 1.0, 2**18: 1.1}) == rule
    assert _tile_calibration.calibrated(2**16, {2**17: 1.0, 2**18: 1.1}) == 2**17  # the rule's share not measured
    assert _tile_calibration.calibrated(rule, {2**18: 0.9, 2**19: 0.9}) == 2**18  # ties: the smaller


def test_measure_times_every_candidate_per_score():
    seconds = _tile_calibration.measure(retrieval_recall, (2**10, 2**12), rounds=1, shape=(32, 160, 8))
    assert set(seconds) == {2**10, 2**12} and all(0 < s < 1e-3 for s in seconds.values())


def test_calibrated_once_for_large_work_and_kept(fresh_cache):
    g = torch.Generator().manual_seed(0)
    items, texts = torch.randn(2048, 4, generator=g), torch.randn(BIG // 2048 - 1, 4, generator=g)
    retrieval_recall(items, texts, torch.arange(len(texts)) * 2048 // len(texts))  # just under: no calibration
    assert "tile_elems" not in _entry(fresh_cache), "small work calibrated"
    assert cpu_tile_elems_per_thread(BIG) == l2_share()  # none kept yet
    texts = torch.cat([texts, texts[:1]])
    retrieval_recall(items, texts, torch.arange(len(texts)) * 2048 // len(texts))  # the engine calibrates first
    share = cpu_tile_elems_per_thread(BIG)
    kept = json.loads(fresh_cache.read_text())[_cpu_blas._machine_key()]["tile_elems"]["torch"]
    seconds = {int(k): v for k, v in kept["seconds_per_score"].items()}
    assert set(seconds) == set(TINY["CANDIDATES"]) and kept["l2_share"] == l2_share()
    assert share == kept["elems"] == _tile_calibration.calibrated(l2_share(), seconds)
    assert tile_budget(max_chunk_bytes=2**40, device=torch.device("cpu"), threads=2, scores=BIG) == 2 * share
    # a later process (here: this one, its memory cleared) reads the kept share rather than
    # measuring again: one it could not have measured
    data = json.loads(fresh_cache.read_text())
    data[_cpu_blas._machine_key()]["tile_elems"]["torch"]["elems"] = 12345
    fresh_cache.write_text(json.dumps(data))
    _tile_calibration._known.clear()
    assert cpu_tile_elems_per_thread(BIG) == 12345
    # an entry of another L2 rule (another kernel's reading of the caches), or a malformed one,
    # is measured again
    for kept in ({**data[_cpu_blas._machine_key()]["tile_elems"]["torch"], "l2_share": l2_share() * 2},
                 "not a dict"):
        data[_cpu_blas._machine_key()]["tile_elems"]["torch"] = kept
        fresh_cache.write_text(json.dumps(data))
        _tile_calibration._known.clear()
        assert cpu_tile_elems_per_thread(BIG) == l2_share()  # not kept: the L2 rule until calibrated
        _tile_calibration.ensure(BIG, l2_share(), retrieval_recall)
        again = cpu_tile_elems_per_thread(BIG)
        assert again == share_of(fresh_cache) and again != 12345


def test_a_share_is_kept_for_each_counting_loop(fresh_cache, monkeypatch):
    pytest.importorskip("numba")
    assert _tile_calibration.variant() == "torch"
    _tile_calibration.ensure(BIG, l2_share(), retrieval_recall)
    monkeypatch.setenv("VLR_COUNT_KERNEL", "numba")  # the tile work differs: measured again, kept apart
    assert _tile_calibration.variant() == "torch+numba"
    assert cpu_tile_elems_per_thread(BIG) == l2_share()  # none kept for it yet
    _tile_calibration.ensure(BIG, l2_share(), retrieval_recall)
    shares = _entry(fresh_cache)["tile_elems"]
    assert set(shares) == {"torch", "torch+numba"}
    assert cpu_tile_elems_per_thread(BIG) == shares["torch+numba"]["elems"]
    monkeypatch.setenv("VLR_COUNT_KERNEL", "torch")
    assert cpu_tile_elems_per_thread(BIG) == shares["torch"]["elems"]


def test_the_loops_saving_is_read_from_both_calibrations(fresh_cache, monkeypatch):
    """What numba's loops save a score (for _count_kernels.prepare's choice): the fastest share's
    seconds without them less the fastest with them, and their loading's time, once both are kept."""
    pytest.importorskip("numba")
    from vlr_plugins.eval import _count_kernels

    assert _tile_calibration.count_saving() is None  # nothing kept
    _tile_calibration.ensure(BIG, l2_share(), retrieval_recall)
    assert _tile_calibration.count_saving() is None  # only the plain counting measured
    monkeypatch.setenv("VLR_COUNT_KERNEL", "numba")
    assert _count_kernels.prepare(1)
    _tile_calibration.ensure(BIG, l2_share(), retrieval_recall)
    shares = _entry(fresh_cache)["tile_elems"]
    reloaded = _count_kernels.reload_seconds()  # None where this process compiled them into numba's cache
    assert shares["torch+numba"].get(_tile_calibration.RELOAD_KEY) == reloaded
    plain, loops = (min(shares[v]["seconds_per_score"].values()) for v in ("torch", "torch+numba"))
    assert _tile_calibration.count_saving() == (pytest.approx(plain - loops), reloaded)
    # a kept measurement with the load's time: the break-even it gives
    data = json.loads(fresh_cache.read_text())
    record = data[_cpu_blas._machine_key()]["tile_elems"]["torch+numba"]
    record[_tile_calibration.RELOAD_KEY] = 0.25
    fresh_cache.write_text(json.dumps(data))
    _tile_calibration._savings.clear()
    saving = _tile_calibration.count_saving()
    assert saving == (pytest.approx(plain - loops), 0.25)
    assert _count_kernels.break_even(saving) == (pytest.approx(0.25 / (plain - loops)) if plain > loops
                                                 else float("inf"))
    # an earlier version's record: its own loading's time, a compilation's included where it was the
    # machine's first, is not read (LOAD_SECONDS rules)
    del record[_tile_calibration.RELOAD_KEY]
    record["load_s"] = 3.4
    fresh_cache.write_text(json.dumps(data))
    _tile_calibration._savings.clear()
    assert _tile_calibration.count_saving() == (pytest.approx(plain - loops), None)


def test_the_statistics_passes_share_is_calibrated_on_their_own_work_and_kept_apart(fresh_cache, monkeypatch):
    """A re-normalisation's statistics passes (DSL's log-sum-exps, QB-Norm's bank pass) take the
    share measured on their own work, kept as ``<BLAS>:statistics`` beside the engine's, the
    first time a re-normalised evaluation is large enough; the engine's share is its own."""
    from vlr_plugins.eval import _tiles
    from vlr_plugins.eval.renorm import DualSoftmax, QueryBankNorm, renorm_keys
    from vlr_plugins.eval.renorm_pass import ensure_share

    small = 48 * 240  # "large enough" lowered to a test's size, in both modules that read it
    monkeypatch.setattr(_tile_calibration, "CALIBRATE_FROM", small)
    monkeypatch.setattr(_tiles, "CALIBRATE_FROM", small)
    measured = []
    measure = _tile_calibration.measure
    monkeypatch.setattr(_tile_calibration, "measure", lambda work, *a, **k: measured.append(work) or measure(work, *a, **k))
    g = torch.Generator().manual_seed(1)
    items, texts = torch.randn(48, 8, generator=g), torch.randn(240, 8, generator=g)
    owner = torch.arange(240) * 48 // 240
    retrieval_recall(items, texts, owner)  # plain: the engine's share alone
    assert set(_entry(fresh_cache)["tile_elems"]) == {"torch"} and len(measured) == 1
    assert _tile_calibration.variant(_tile_calibration.STATISTICS) == "torch:statistics"
    assert cpu_tile_elems_per_thread(small, _tile_calibration.STATISTICS) == l2_share()  # none kept yet
    dsl = retrieval_recall(items, texts, owner, renorm=DualSoftmax(30.0), return_ranks=True)
    shares = _entry(fresh_cache)["tile_elems"]
    assert set(shares) == {"torch", "torch:statistics"} and len(measured) == 2
    kept = shares["torch:statistics"]
    seconds = {int(k): v for k, v in kept["seconds_per_score"].items()}
    assert set(seconds) == set(TINY["CANDIDATES"]) and kept["l2_share"] == l2_share()
    assert kept["elems"] == _tile_calibration.calibrated(l2_share(), seconds)
    assert cpu_tile_elems_per_thread(small, _tile_calibration.STATISTICS) == kept["elems"]
    assert cpu_tile_elems_per_thread(small) == shares["torch"]["elems"]
    # kept: read, not measured again, by QB-Norm's bank pass too
    retrieval_recall(items, texts, owner, renorm=QueryBankNorm(text_bank=texts))
    ensure_share(small, torch.device("cpu"))
    assert len(measured) == 2
    # the passes' tiles follow the kept share (here one the calibration could not have chosen),
    # with the same ranks (the statistics agree to float32 rounding: their tiles' sums differ)
    data = json.loads(fresh_cache.read_text())
    data[_cpu_blas._machine_key()]["tile_elems"]["torch:statistics"]["elems"] = 1024
    fresh_cache.write_text(json.dumps(data))
    _tile_calibration._known.clear()
    assert tile_budget(max_chunk_bytes=2**40, device=torch.device("cpu"), threads=2, scores=small,
                       kind=_tile_calibration.STATISTICS) == 2048
    matrix = _tiles.ScoreMatrix(items, texts, owner, device=torch.device("cpu"), max_chunk_bytes=2**30)
    rows, cols = matrix.tile_shape_of(_tile_calibration.STATISTICS)
    assert rows * cols <= 1024 * torch.get_num_threads() < matrix.tile_items * matrix.tile_texts
    from vlr_plugins.eval import renorm_pass

    products = []
    product = renorm_pass.tile_product
    monkeypatch.setattr(renorm_pass, "tile_product", lambda *a, **k: products.append(1) or product(*a, **k))
    again = retrieval_recall(items, texts, owner, renorm=DualSoftmax(30.0), return_ranks=True)
    engine_tiles = -(-48 // matrix.tile_items) * -(-240 // matrix.tile_texts)
    assert len(products) == -(-48 // rows) * -(-240 // cols) != engine_tiles  # the statistics pass's tiles
    for name in ("t2i_ranks", "i2t_ranks"):
        assert torch.equal(again[name], dsl[name]), name
    keys = renorm_keys(DualSoftmax(30.0), matrix)
    monkeypatch.setenv("VLR_CPU_TILE_ELEMS", str(2**16))  # one tile
    whole = renorm_keys(DualSoftmax(30.0), matrix)
    assert torch.allclose(keys.item_lse, whole.item_lse, rtol=0, atol=1e-5)
    assert torch.allclose(keys.text_lse, whole.text_lse, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="unknown kind of tile work 'ranks'"):
        _tile_calibration.variant("ranks")


def _entry(cache: Path) -> dict:
    """This machine's entry of the cache file ({} where there is none)."""
    return json.loads(cache.read_text()).get(_cpu_blas._machine_key(), {}) if cache.exists() else {}


def share_of(cache: Path) -> int:
    return json.loads(cache.read_text())[_cpu_blas._machine_key()]["tile_elems"]["torch"]["elems"]


_CHILD = """
import json, sys
from vlr_plugins.eval import _tile_calibration, retrieval_recall
from vlr_plugins.eval._tiles import cpu_tile_elems_per_thread, l2_share
for name, value in json.loads(sys.argv[1]).items():
    setattr(_tile_calibration, name, tuple(value))
measured, measure = [], _tile_calibration.measure
_tile_calibration.measure = lambda *a, **k: measured.append(1) or measure(*a, **k)
_tile_calibration.ensure(_tile_calibration.CALIBRATE_FROM, l2_share(), retrieval_recall)
print(json.dumps([cpu_tile_elems_per_thread(_tile_calibration.CALIBRATE_FROM), bool(measured)]))
"""


def _child(cache_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "VLR_CACHE_DIR": str(cache_dir), "VLR_CPU_BLAS": "torch", "PYTHONPATH": str(SRC)}
    env.pop("VLR_CPU_TILE_ELEMS", None)
    tiny = {k: list(v) if isinstance(v, tuple) else v for k, v in TINY.items() if k != "_ROUNDS"}
    return subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(tiny)], env=env, stdout=subprocess.PIPE,
                            text=True)


def test_processes_started_at_once_measure_once_and_agree(fresh_cache):
    children = [_child(fresh_cache.parent) for _ in range(2)]
    answers = []
    for child in children:
        out, _ = child.communicate(timeout=120)
        assert child.returncode == 0
        answers.append(json.loads(out))
    assert len({share for share, _ in answers}) == 1, answers
    assert sum(measured for _, measured in answers) == 1, answers
    assert answers[0][0] == share_of(fresh_cache)


def test_the_override(fresh_cache, monkeypatch):
    monkeypatch.setenv("VLR_CPU_TILE_ELEMS", "l2")
    assert cpu_tile_elems_per_thread(BIG) == l2_share()
    monkeypatch.setenv("VLR_CPU_TILE_ELEMS", "5000")
    assert cpu_tile_elems_per_thread(BIG) == cpu_tile_elems_per_thread(10) == 5000
    assert tile_budget(max_chunk_bytes=2**40, device=torch.device("cpu"), threads=3) == 15000
    assert "tile_elems" not in _entry(fresh_cache), "an override calibrated"
    for bad, why in (("big", "expected auto, l2 or a number"), ("100", "at least 1024"), ("-5", "at least 1024")):
        monkeypatch.setenv("VLR_CPU_TILE_ELEMS", bad)
        with pytest.raises(ConfigError, match=f"VLR_CPU_TILE_ELEMS='{bad}'.*{why}"):
            cpu_tile_elems_per_thread()


@pytest.mark.parametrize("layout", ["grouped", "interleaved", "near ties"])
def test_the_engine_gives_the_same_ranks_at_any_share(layout, monkeypatch):
    if layout == "near ties":
        items, texts, owner = near_tie_problem(seed=2)
    else:
        items, texts, owner = random_problem(300, 16, seed=5)
        if layout == "grouped":
            order = torch.argsort(owner, stable=True)
            texts, owner = texts[order], owner[order]
    results = []
    for share in ("1024", "4096", "l2"):
        monkeypatch.setenv("VLR_CPU_TILE_ELEMS", share)
        results.append(retrieval_recall(items, texts, owner, ks=(1, 5, 10), return_ranks=True))
    first = results[0]
    for other in results[1:]:
        assert {k: v for k, v in other.items() if "ranks" not in k} == \
            {k: v for k, v in first.items() if "ranks" not in k}
        for name in ("t2i_ranks", "i2t_ranks"):
            assert torch.equal(other[name], first[name]), name
