"""How many scores one CPU thread's tile of the retrieval engine holds on this machine: measured
once, in a short calibration, and kept beside the tile BLAS choice (:mod:`~vlr_plugins.eval._cpu_blas`).

The best share is not a constant, nor a rule of the cache sizes alone: the engine's tile work is
a product (whose speed depends on the tile's shape and the BLAS) followed by element-wise counting
passes over the tile (whose speed depends on where the tile sits in the caches). On the Intel Xeon
the engine was first tuned on (2 MiB of L2 a core) 2^19 scores a thread were fastest and 2^20
slower; on another Intel Xeon (model 167, 2 MiB L2) 2^21; on an AMD EPYC Zen 3 (512 KiB L2) 2^19
to 2^21, 8-19 % faster than the L2 rule's 2^17 (docs/benchmarks.md).

:func:`ensure` (which ``retrieval_recall`` calls before work of at least :data:`CALIBRATE_FROM`
scores on a CPU) measures the engine itself (:func:`measure`) on one thread (a 2,048 x 10,240 recall,
~0.2 s) at each of :data:`CANDIDATES`, alternated round by round (about 3 s in all, once per
machine, tile BLAS and counting loop (:func:`variant`), under the cache file's lock), and keeps :func:`calibrated`'s answer: the
fastest, where it beats the L2 rule's share (:func:`~vlr_plugins.eval._tiles.elems_for_l2`) by
at least :data:`_MARGIN` (a calibration on a busy machine seldom moves it). :func:`per_thread`
reads it (the tiles' module: no measuring there). Work smaller than :data:`CALIBRATE_FROM`
scores (e.g. 5,000 x 13,000) takes the L2 rule's share and never waits for a calibration.

A re-normalisation's statistics passes (:mod:`~vlr_plugins.eval.renorm_pass`: DSL's log-sum-exps,
QB-Norm's bank pass) do other work a tile: the product, then an exponential and row and column
sums, several ATen calls whose fixed costs a larger tile amortises (on a Zen 4 VM, 2 threads,
10K x 50K: 2^20 scores a thread 15-19 % faster than the engine's 2^17). Their share is the
:data:`STATISTICS` kind's, calibrated the same way on their own work (``kind``; kept as
``<BLAS>:statistics``, whatever counts the rank pass: their tiles are counted by no loop), the
first time a re-normalisation's work is large enough (:func:`~vlr_plugins.eval.renorm_pass.ensure_share`).

``VLR_CPU_TILE_ELEMS`` overrides it (every kind): ``auto`` (the default: calibrated), ``l2`` (the L2 rule, no
calibration) or a number of scores per thread (at least 1024). The share only moves the tile
boundaries: the engine's results are exact at any tile shape.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import time
from collections.abc import Callable, Iterator

import torch

from vlr_plugins.errors import ConfigError
from vlr_plugins.eval import _count_kernels, _cpu_blas

__all__ = ["CALIBRATE_FROM", "CANDIDATES", "ENGINE", "STATISTICS", "calibrated", "count_saving",
           "ensure", "forget_machine", "measure", "per_thread", "setting"]

#: the shares measured (scores per thread)
CANDIDATES = tuple(2**k for k in range(17, 22))
#: a measured share replaces the L2 rule's only when at most this fraction of its time
_MARGIN = 0.97
#: the suffix of a variant whose tiles numba's loops count (:func:`variant`)
_NUMBA = "+numba"
_ROUNDS = 3
#: the calibration's matrix: items, texts (5 an item, as COCO's captions), D; ~0.2 s a run
_SHAPE = (2048, 10240, 256)
_LEAST_OVERRIDE = 1024
#: work of at least this many scores takes the calibrated share (calibrating first where no
#: calibration is kept: ~3 s, once a machine), smaller work the L2 rule's (for it the share
#: changes little, and a one-off calibration would cost more than the work)
CALIBRATE_FROM = 2**26
#: the kinds of tile work a share is kept for: the engine's (a product, then counting) and a
#: re-normalisation's statistics passes' (a product, then exponentials and sums)
ENGINE, STATISTICS = "engine", "statistics"
#: the share of the calibration's own runs
_FORCED: contextvars.ContextVar[int | None] = contextvars.ContextVar("vlr_cpu_tile_share", default=None)


def setting() -> str | int:
    """``VLR_CPU_TILE_ELEMS`` as given: ``"auto"`` (the default), ``"l2"`` or a number of scores
    per thread; a :class:`~vlr_plugins.errors.ConfigError` naming it otherwise (commands check it
    up front)."""
    raw = os.environ.get("VLR_CPU_TILE_ELEMS", "auto").strip().lower() or "auto"
    if raw in ("auto", "l2"):
        return raw
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < _LEAST_OVERRIDE:
        raise ConfigError(f"VLR_CPU_TILE_ELEMS={raw!r}: expected auto, l2 or a number of scores per thread "
                          f"(at least {_LEAST_OVERRIDE}) for the retrieval engine's CPU tiles")
    return value


def variant(kind: str = ENGINE) -> str:
    """What a share is kept for: the tile BLAS (:func:`~vlr_plugins.eval._cpu_blas.choice`), with
    ``+numba`` where numba's loop counts the engine's tiles (:mod:`~vlr_plugins.eval._count_kernels`): the
    tile work, and so its best share, differs between them; ``:statistics`` for the
    :data:`STATISTICS` kind (its tiles are no loop's)."""
    blas = _cpu_blas.choice()
    if kind == STATISTICS:
        return f"{blas}:{STATISTICS}"
    if kind != ENGINE:
        raise ValueError(f"unknown kind of tile work {kind!r}: expected {ENGINE!r} or {STATISTICS!r}")
    return f"{blas}{_NUMBA}" if _count_kernels.enabled() else blas


def check_settings() -> None:
    """The engine's CPU settings, each a :class:`~vlr_plugins.errors.ConfigError` naming its
    variable where it is not understood (commands check them before reading anything):
    ``VLR_CPU_BLAS``, ``VLR_CPU_TILE_ELEMS``, ``VLR_COUNT_KERNEL``."""
    _cpu_blas.setting()
    setting()
    _count_kernels.setting()


def per_thread(l2_share: int, calibrate: bool = True, kind: str = ENGINE) -> int:
    """Scores per thread of the CPU tiles of ``kind``'s work: ``VLR_CPU_TILE_ELEMS``'s number, ``l2_share``
    (the L2 rule's) under ``l2``, else with ``calibrate`` the share kept for this machine, tile
    BLAS and kind (by :func:`ensure`; ``l2_share`` until one is), without it ``l2_share``."""
    if (forced := _FORCED.get()) is not None:
        return forced
    wanted = setting()
    if wanted == "l2":
        return l2_share
    if isinstance(wanted, int):
        return wanted
    if not calibrate:
        return l2_share
    kept = _kept(variant(kind), l2_share)
    return l2_share if kept is None else kept


def _records(entry: object) -> dict:
    """A cache entry's calibration records by variant ({} where it holds none readable)."""
    shares = entry.get("tile_elems") if isinstance(entry, dict) else None
    return shares if isinstance(shares, dict) else {}


def _kept_in(entry: object, blas: str, l2_share: int) -> int | None:
    found = _records(entry).get(blas)
    if isinstance(found, dict) and found.get("l2_share") == l2_share and isinstance(found.get("elems"), int):
        return found["elems"]
    return None


#: (tile BLAS, the L2 rule's share) -> the share this process knows (read from the cache file or measured)
_known: dict[tuple[str, int], int] = {}


def _kept(blas: str, l2_share: int) -> int | None:
    """The share this process knows for ``blas``, else the one kept in this machine's cache
    entry (read then), or None."""
    if (blas, l2_share) not in _known:
        found = _kept_in(_cpu_blas._read_cache(_cpu_blas._cache_file()).get(_cpu_blas._machine_key()),
                         blas, l2_share)
        if found is None:
            return None
        _known[(blas, l2_share)] = found
    return _known[(blas, l2_share)]


def ensure(scores: int, l2_share: int, engine: Callable[..., object], kind: str = ENGINE) -> None:
    """Before work of ``scores`` scores: where it is at least :data:`CALIBRATE_FROM` and
    ``VLR_CPU_TILE_ELEMS`` is ``auto``, calibrate this machine's share of ``kind``'s tiles in the
    tile BLAS :func:`~vlr_plugins.eval._cpu_blas.choice` takes, unless one is kept: :func:`measure`
    the ``engine`` (``retrieval_recall``, or a statistics pass for :data:`STATISTICS`; about 3 s)
    under the cache file's lock, so that processes started at once measure once, and keep the
    share beside the BLAS choice."""
    if scores < CALIBRATE_FROM or setting() != "auto" or _FORCED.get() is not None:
        return
    blas = variant(kind)
    if _kept(blas, l2_share) is not None:
        return
    known = _cpu_blas._machine_entry()  # the BLAS choice measured first (its own lock)
    path, key = _cpu_blas._cache_file(), _cpu_blas._machine_key()
    with _cpu_blas._cache_lock(path):
        data = _cpu_blas._read_cache(path)
        entry = data.get(key)
        elems = _kept_in(entry, blas, l2_share)
        if elems is None:
            seconds = measure(engine)
            elems = calibrated(l2_share, seconds)
            if not _cpu_blas._valid_entry(entry):  # unreadable or replaced: keep what this process knows
                entry = dict(known)
            if not isinstance(entry.get("tile_elems"), dict):
                entry["tile_elems"] = {}
            record = {"elems": elems, "l2_share": l2_share,
                      "seconds_per_score": {str(k): v for k, v in sorted(seconds.items())}}
            if blas.endswith(_NUMBA) and _count_kernels.reload_seconds() is not None:
                record[RELOAD_KEY] = _count_kernels.reload_seconds()  # for count_saving
            entry["tile_elems"][blas] = record
            data[key] = entry
            _cpu_blas._write_cache(path, data)  # where it cannot be written, this process still knows
    _known[(blas, l2_share)] = elems


#: the key of a calibration record with the loops that keeps what loading them takes a process
#: reading them from numba's cache (:func:`~vlr_plugins.eval._count_kernels.reload_seconds`). The
#: records of earlier versions kept ``load_s``, the calibrating process's own loading, which on a
#: machine's first load includes compiling them (3.4 s against 0.57 s a later load, Intel Xeon VM):
#: not read, so that it does not hold the loops back ~6x longer than their saving repays
RELOAD_KEY = "reload_s"


def count_saving() -> tuple[float, float | None] | None:
    """What numba's counting loops save on this machine, for
    :func:`~vlr_plugins.eval._count_kernels.prepare`'s choice: (CPU seconds a score on one thread,
    the engine's fastest share without the loops less its fastest with them; the seconds a
    process's loading takes where timed, :data:`RELOAD_KEY`, else None), both read from the
    calibrations of the tile BLAS
    :func:`~vlr_plugins.eval._cpu_blas.choice` takes with and without them (:func:`ensure`); None
    until both were measured (the one with the loops is, the first time a process here loads them
    for work of at least :data:`CALIBRATE_FROM` scores)."""
    blas = _cpu_blas.choice()
    if blas not in _savings:
        records = _records(_cpu_blas._read_cache(_cpu_blas._cache_file()).get(_cpu_blas._machine_key()))
        plain, loops = records.get(blas), records.get(blas + _NUMBA)
        without, with_loops = _fastest(plain), _fastest(loops)
        if without is None or with_loops is None:
            return None  # not kept: read again next time (a calibration may add it)
        load = loops.get(RELOAD_KEY)
        _savings[blas] = (without - with_loops, float(load) if isinstance(load, (int, float)) else None)
    return _savings[blas]


def _fastest(record: object) -> float | None:
    """The least seconds a score of a calibration record (its fastest share), or None."""
    seconds = record.get("seconds_per_score") if isinstance(record, dict) else None
    if not isinstance(seconds, dict):
        return None
    values = [v for v in seconds.values() if isinstance(v, (int, float)) and v > 0]
    return min(values) if values else None


#: tile BLAS -> :func:`count_saving`'s answer, once read
_savings: dict[str, tuple[float, float | None]] = {}


@contextlib.contextmanager
def _share(elems: int) -> Iterator[None]:
    """The engine's CPU tiles at ``elems`` scores a thread inside (the calibration's runs)."""
    token = _FORCED.set(elems)
    try:
        yield
    finally:
        _FORCED.reset(token)


def measure(engine: Callable[..., object], candidates: tuple[int, ...] | None = None, *,
            rounds: int | None = None, shape: tuple[int, int, int] | None = None) -> dict[int, float]:
    """CPU seconds per score of the ``engine`` itself (:func:`~vlr_plugins.eval.retrieval_recall`:
    recall only, texts grouped by item, on one thread; or any work called as ``engine(items,
    texts, owner)``, whose tiles follow the share) at each share of ``candidates`` (default
    :data:`CANDIDATES`): the fastest of ``rounds`` rounds that alternate them, on seeded random
    unit vectors of ``shape`` (items, texts, D; default ``_SHAPE``)."""
    candidates, rounds, shape = candidates or CANDIDATES, rounds or _ROUNDS, shape or _SHAPE
    n_items, n_texts, dim = shape
    generator = torch.Generator().manual_seed(0)
    items = torch.randn(n_items, dim, generator=generator)
    texts = torch.randn(n_texts, dim, generator=generator)
    owner = torch.arange(n_texts) * n_items // n_texts
    best = {elems: math.inf for elems in candidates}

    def run(elems: int) -> float:
        with _share(elems):
            start = time.process_time()
            engine(items, texts, owner)
            return (time.process_time() - start) / (n_items * n_texts)

    with _cpu_blas.blas_threads(1):
        run(candidates[0])  # warm-up
        for _ in range(rounds):
            for elems in candidates:
                best[elems] = min(best[elems], run(elems))
    return best


def calibrated(l2_share: int, seconds: dict[int, float]) -> int:
    """The share to keep from :func:`measure`'s ``seconds``: the fastest, where it takes at most
    :data:`_MARGIN` of the L2 rule's ``l2_share`` time (or the L2 rule's share was not measured),
    else ``l2_share``."""
    fastest = min(seconds, key=lambda elems: (seconds[elems], elems))
    rule = seconds.get(l2_share)
    if rule is None or seconds[fastest] <= _MARGIN * rule:
        return fastest
    return l2_share


def forget_machine() -> bool:
    """Drop this machine's entry (tile BLAS, every share) from the cache file, under its lock, and
    what this process knows of it, so that the next work measures anew; whether there was one."""
    path, key = _cpu_blas._cache_file(), _cpu_blas._machine_key()
    with _cpu_blas._cache_lock(path):
        data = _cpu_blas._read_cache(path)
        found = data.pop(key, None) is not None
        if found:
            _cpu_blas._write_cache(path, data)
    _cpu_blas._machine_entry.cache_clear()
    _known.clear()
    _savings.clear()
    return found

