"""The engine's count-above step on a CPU as one compiled loop (numba), where numba is installed.

Every pass of the recall engine ends each tile with "how many scores of this row (column) are
above its threshold": in torch that is a comparison written to a float mask and a
matrix-vector product summing it (:func:`~vlr_plugins.eval._tiles.count_above`), two passes over
a tile-sized buffer. One loop that compares and counts as it reads does it without the mask:
on a 228 x 1,136 tile on one Zen 5 core, 14 us a direction against 36 us (docs/benchmarks.md).

The counts are the same numbers either way — each compares the same float32 scores with the same
float32 thresholds and adds 0 or 1 to the same float32 (float64) accumulators, exact below 2^24
(2^53) — so the kernel changes no result, only the time; the tests run the engine both ways.
Once loaded, the same module also keeps the running top-1 of the re-normalisations' passes in a
compiled loop (:func:`best`, by :func:`~vlr_plugins.eval.renorm_pass.update_best`'s rules).

Loading numba costs a process ~0.4 s (its own imports; ~1 s more the first time on a machine, to
compile the loops, which its cache then keeps: beside this file, else its user-wide directory,
or ``NUMBA_CACHE_DIR``) and ~150 MB of resident memory (LLVM), once. So under
``VLR_COUNT_KERNEL=auto`` (the default) the loops are loaded (:func:`prepare`, which
``retrieval_recall`` calls) once the process's counting has been large enough to repay the
loading, and used for every later call of the process once they are; ``numba`` uses them for
any work (loading them on the first), ``torch`` never. numba is the ``fast`` extra (in ``all``).

"Large enough" is the rule of renting until the rent paid equals the price: the scores a thread
this process has counted in torch's comparisons, the coming work's included, against
:func:`break_even` -- the loading's seconds over the seconds a score the loops save, both as
this machine measured them (the tile calibration of the engine with and without the loops,
:func:`~vlr_plugins.eval._tile_calibration.count_saving`), else :data:`NUMBA_FROM_PER_THREAD`.
One large gallery loads them at once (COCO's train split: 7e10 scores); one 10K x 50K
evaluation does not, where the loading would cost more than it saves; a process that evaluates
again and again (a training run's validation, a truncation sweep, a Pareto report over
checkpoints) loads them once its counting has cost what the loading does, and so never spends
more than twice what the better choice in hindsight would have.
"""

from __future__ import annotations

import functools
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from vlr_plugins.errors import ConfigError

__all__ = ["LOAD_SECONDS", "NUMBA_FROM_PER_THREAD", "best", "break_even", "count", "enabled", "load_seconds",
           "prepare", "setting"]

_CHOICES = ("numba", "torch", "auto")
_LOCK = threading.RLock()


def setting() -> str:
    """``VLR_COUNT_KERNEL`` as given: ``numba``, ``torch`` or ``auto`` (the default); a
    :class:`~vlr_plugins.errors.ConfigError` naming it otherwise, or when ``numba`` is asked
    for and does not import (commands check it up front)."""
    wanted = os.environ.get("VLR_COUNT_KERNEL", "auto").strip().lower() or "auto"
    if wanted not in _CHOICES:
        raise ConfigError(f"VLR_COUNT_KERNEL={wanted!r}: expected one of numba, torch, auto (the retrieval "
                          "engine's CPU counting step)")
    if wanted == "numba" and _kernels() is None:
        raise ConfigError("VLR_COUNT_KERNEL=numba: numba is not installed (pip install 'vlr-plugins[fast]'); "
                          "use torch or auto")
    return wanted


def enabled() -> bool:
    """Whether CPU float32 tiles are counted by the compiled loops now: ``VLR_COUNT_KERNEL=numba``
    (loaded here if need be), or under ``auto`` once this process has loaded them
    (:func:`prepare`). The environment is read each call, cheaply (tests and benchmarks switch it)."""
    wanted = os.environ.get("VLR_COUNT_KERNEL", "auto").strip().lower() or "auto"
    if wanted == "auto":
        return _loaded.is_set()
    if wanted == "torch":
        return False
    if wanted == "numba":
        if _kernels() is None:
            setting()  # raises: not installed
        return True
    setting()  # raises, naming the variable
    return False


#: under ``auto`` where this machine has not measured the loops' saving: they are loaded once the
#: process has counted this many scores per thread: loading numba takes ~0.4 s (and ~1 s more the
#: first time on a machine, to compile them) against ~1e-10 s a score saved on each of two Zen 5
#: threads (docs/benchmarks.md), the least saving seen, so that no machine loads them too early
NUMBA_FROM_PER_THREAD = 2**31
#: the seconds loading the loops takes where this machine's calibration did not time it: import
#: and first calls, their compiled code read from numba's cache (0.4 s on a Zen 5 VM, 0.53 s on a
#: Zen 4 VM)
LOAD_SECONDS = 0.5


def break_even(saving: tuple[float, float | None] | None) -> float:
    """Scores per thread after which loading the loops has paid for itself: from ``saving``
    (CPU seconds a score the loops save on one thread, seconds their loading took or None), as this
    machine measured it (:func:`~vlr_plugins.eval._tile_calibration.count_saving`), the loading's
    seconds (:data:`LOAD_SECONDS` where not timed) over the saving; infinite where the loops were
    measured no faster; without a measurement :data:`NUMBA_FROM_PER_THREAD`."""
    if saving is None:
        return float(NUMBA_FROM_PER_THREAD)
    per_score, load = saving
    if not per_score > 0:
        return math.inf
    return (load if load is not None and load > 0 else LOAD_SECONDS) / per_score


#: scores a thread this process has counted under ``auto`` before the loops were loaded (the
#: "rent paid so far" of :func:`prepare`)
_counted = 0.0
#: below this many counted scores a thread the machine's measurement is not read (the cache file),
#: :data:`NUMBA_FROM_PER_THREAD` rules: a measured break-even there would need the loops to save
#: over 20 ns a score, more than the whole engine takes a score on one thread of any CPU measured
#: (7 ns with its product, docs/benchmarks.md)
_MEASURED_FROM = 2**24


def prepare(scores: int, threads: int | None = None,
            saving: Callable[[], tuple[float, float | None] | None] | None = None) -> bool:
    """Before work of ``scores`` scores on ``threads`` CPU threads (default torch's): under
    ``auto``, load and warm the loops once the scores a thread this process has counted, this
    work's included, reach :func:`break_even` of ``saving()`` (this machine's measurement, read
    only while the loops are not loaded; None: not measured) and numba imports; under ``numba``,
    always. Done here, before any worker starts, so that no tile waits on a compilation.
    Returns :func:`enabled`."""
    global _counted
    wanted = setting()
    if wanted == "torch":
        return False
    if wanted == "auto" and not _loaded.is_set():
        with _LOCK:
            _counted += scores / (threads or torch.get_num_threads())
            measured = saving() if saving is not None and _counted >= _MEASURED_FROM else None
            if _counted < break_even(measured):
                return False
    return _warm() or wanted == "numba"


def load_seconds() -> float | None:
    """What loading the loops took in this process (import, first calls), or None where this
    process has not loaded them."""
    return _load_seconds


_load_seconds: float | None = None
_loaded = threading.Event()


def _warm() -> bool:
    """Load the loops and run each once on a tiny tile (numba compiles, or reads its cache, per
    argument types on a first call): True where numba imports."""
    global _load_seconds
    start = time.perf_counter()
    kernels = _kernels()
    if kernels is None:
        return False
    with _LOCK:
        if not _loaded.is_set():
            tile, counts = np.zeros((2, 2), np.float32), np.zeros(2, np.float32)
            index = np.zeros(2, np.int64)
            for name, kernel in kernels.items():
                if name == "best_cols":
                    kernel(tile.reshape(-1), 2, 2, 2, 0, counts.copy(), index.copy(), counts.copy(), index.copy())
                elif name == "best_rows":
                    kernel(tile.reshape(-1), 2, 2, 2, 0, counts.copy(), index.copy(), counts.copy())
                else:
                    kernel(tile.reshape(-1), 2, 2, 2, counts, counts.copy())
            _load_seconds = time.perf_counter() - start
            _loaded.set()
    return True


@functools.lru_cache(maxsize=1)
def _kernels() -> dict[str, Callable[..., None]] | None:
    """The compiled loops by name, or None where numba does not import."""
    try:
        import numba
    except ImportError:
        return None
    with _LOCK:
        return {name: _jit(numba, fn) for name, fn in _sources().items()}


def _jit(numba: Any, fn: Callable[..., None]) -> Callable[..., None]:
    try:
        return numba.njit(nogil=True, cache=True)(fn)
    except RuntimeError:  # no writable cache location: compile in each process
        return numba.njit(nogil=True)(fn)


def _sources() -> dict[str, Callable[..., None]]:
    """The loops: ``flat`` a tile's rows one after another ``stride`` apart (its first ``cols``
    of each valid), ``thresholds`` one per row (``rows_*``) or per column (``cols_*``), ``counts``
    added to. The row slices keep numba's contiguous layout, which it vectorises."""
    one = np.int32

    def rows_gt(flat, n_rows, n_cols, stride, thresholds, counts):
        for i in range(n_rows):
            t, acc, row = thresholds[i], one(0), flat[i * stride:i * stride + n_cols]
            for j in range(n_cols):
                acc += one(row[j] > t)
            counts[i] += acc

    def rows_eq(flat, n_rows, n_cols, stride, thresholds, counts):
        for i in range(n_rows):
            t, acc, row = thresholds[i], one(0), flat[i * stride:i * stride + n_cols]
            for j in range(n_cols):
                acc += one(row[j] == t)
            counts[i] += acc

    def cols_gt(flat, n_rows, n_cols, stride, thresholds, counts):
        for i in range(n_rows):
            row = flat[i * stride:i * stride + n_cols]
            for j in range(n_cols):
                counts[j] += row[j] > thresholds[j]

    def cols_eq(flat, n_rows, n_cols, stride, thresholds, counts):
        for i in range(n_rows):
            row = flat[i * stride:i * stride + n_cols]
            for j in range(n_cols):
                counts[j] += row[j] == thresholds[j]

    # a tile's running top-1 (renorm_pass.update_best): each query's first maximum in the tile
    # (rows: along each row, from its maximum ``peaks`` found by torch's vectorised amax; columns:
    # down each column, kept in ``peaks`` / ``at``), taken where it beats the running best, or
    # equals it while the running best lies after the tile's first entry (``g0``)
    def best_rows(flat, n_rows, n_cols, stride, g0, best, index, peaks):
        for i in range(n_rows):
            m = peaks[i]
            if m > best[i] or (m == best[i] and index[i] > g0):
                row, j = flat[i * stride:i * stride + n_cols], 0
                while row[j] != m:
                    j += 1
                best[i], index[i] = m, g0 + j

    def best_cols(flat, n_rows, n_cols, stride, g0, best, index, peaks, at):
        for j in range(n_cols):
            peaks[j], at[j] = flat[j], 0
        for i in range(1, n_rows):
            row = flat[i * stride:i * stride + n_cols]
            for j in range(n_cols):
                if row[j] > peaks[j]:
                    peaks[j], at[j] = row[j], i
        for j in range(n_cols):
            m = peaks[j]
            if m > best[j] or (m == best[j] and index[j] > g0):
                best[j], index[j] = m, g0 + at[j]

    return {"rows_gt": rows_gt, "rows_eq": rows_eq, "cols_gt": cols_gt, "cols_eq": cols_eq,
            "best_rows": best_rows, "best_cols": best_cols}


_COMPARES = {torch.gt: "gt", torch.eq: "eq"}
_COUNTS_DTYPES = (torch.float32, torch.float64)


def count(scores: torch.Tensor, thresholds: torch.Tensor, dim: int, counts: torch.Tensor,
          compare: Callable[..., torch.Tensor]) -> bool:
    """counts += how many ``compare(scores, thresholds)`` hold along ``dim``, as
    :func:`~vlr_plugins.eval._tiles.count_above` (its shapes), in the compiled loop; False
    (nothing done) where the loop does not apply: not enabled, not a CPU float32 tile with
    unit column stride, another comparison, thresholds or counts of another dtype or layout."""
    if not enabled() or compare not in _COMPARES:
        return False
    if not scores.is_cpu or scores.dtype != torch.float32 or scores.dim() != 2:
        return False
    n_rows, n_cols = scores.shape
    n_out = n_cols if dim == 0 else n_rows
    if (thresholds.dtype != torch.float32 or thresholds.numel() != n_out or counts.dtype not in _COUNTS_DTYPES
            or counts.shape != (n_out,) or not counts.is_contiguous() or not counts.is_cpu):
        return False
    if n_rows == 0 or n_cols == 0:
        return True
    if (rows := _flat_rows(scores)) is None:
        return False
    kernel = _kernels()[f"{'cols' if dim == 0 else 'rows'}_{_COMPARES[compare]}"]
    _loaded.set()  # VLR_COUNT_KERNEL=numba: loaded now, compiled at this first call if need be
    flat, stride = rows
    kernel(flat, n_rows, n_cols, stride, thresholds.numpy().reshape(n_out), counts.numpy())
    return True


def _flat_rows(scores: torch.Tensor) -> tuple[np.ndarray, int] | None:
    """A non-empty (R, C) CPU tile's rows as one flat array (its first element to its last, the
    gaps between rows included) and the rows' stride, or None where its columns are not adjacent."""
    n_rows, n_cols = scores.shape
    row_stride, col_stride = scores.stride()
    stride = row_stride if n_rows > 1 else n_cols
    if (n_cols > 1 and col_stride != 1) or stride < n_cols:
        return None
    return torch.as_strided(scores, ((n_rows - 1) * stride + n_cols,), (1,)).numpy(), stride


def best(scores: torch.Tensor, dim: int, g0: int, values: torch.Tensor, index: torch.Tensor) -> bool:
    """The running top-1 of :func:`~vlr_plugins.eval.renorm_pass.update_best` (its rules: the
    first maximum of each query's row (``dim`` 1) or column (``dim`` 0) of the tile, taken where
    it beats ``values`` / ``index``, or equals it while the running best lies after ``g0``) in a
    compiled loop: one read of the tile down its columns, or torch's row maxima and a search for
    them in the rows that improve; False (nothing done) where the loops do not apply (not
    enabled, not a CPU float32 tile with unit column stride, running bests of another dtype or
    layout)."""
    if not enabled() or not scores.is_cpu or scores.dtype != torch.float32 or scores.dim() != 2:
        return False
    n_rows, n_cols = scores.shape
    n_out = n_cols if dim == 0 else n_rows
    if (values.dtype != torch.float32 or index.dtype != torch.int64 or values.shape != (n_out,)
            or index.shape != (n_out,) or not (values.is_contiguous() and index.is_contiguous())
            or not (values.is_cpu and index.is_cpu)):
        return False
    if n_rows == 0 or n_cols == 0:
        return True
    if (rows := _flat_rows(scores)) is None:
        return False
    kernels = _kernels()
    _loaded.set()
    flat, stride = rows
    if dim == 0:
        kernels["best_cols"](flat, n_rows, n_cols, stride, g0, values.numpy(), index.numpy(),
                             np.empty(n_cols, np.float32), np.empty(n_cols, np.int64))
    else:
        kernels["best_rows"](flat, n_rows, n_cols, stride, g0, values.numpy(), index.numpy(),
                             scores.amax(1).numpy())
    return True
