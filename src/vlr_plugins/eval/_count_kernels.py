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
compiled loop (:func:`best`, by :func:`~vlr_plugins.eval.renorm_pass.update_best`'s rules), and
counts every channel of an off-diagonal tile of the grouped rank pass in one read of it
(:func:`raw_counter` for the plain engine's two directions; :func:`dual_softmax_counter`,
:func:`query_bank_counter` for the re-normalisations: the keys made on the fly by the same
float32 operations as torch's element-wise steps, each rounded once as there, so again the same
counts and top-1s; the dual softmax's exponentials stay torch's, whose vector code gives equal
scores equal keys).

Loading numba costs a process ~0.4 s (its own imports; ~3 s more the first time on a machine, to
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

__all__ = ["LOAD_SECONDS", "NUMBA_FROM_PER_THREAD", "RENORM_WEIGHT", "BankSide", "Channel", "TileCounter", "best", "break_even", "count",
           "dual_softmax_counter", "enabled", "load_seconds", "prepare", "query_bank_counter", "raw_counter",
           "reload_seconds", "setting", "top_lists"]

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


#: what a score of a re-normalised evaluation (dual softmax, QB-Norm) weighs in :func:`prepare`
#: against one of a plain evaluation, whose saving the machine's calibration measures: the loops
#: take over its rank pass's element-wise steps too (DSL: 10 passes over a tile become 3, where
#: the plain engine's 4 become 2). Measured (10K x 50K, one thread, the whole call with and
#: without the loops, against the calibration's saving a score): on a Zen 4 VM 4.1x for DSL and
#: 6.5x for QB-Norm, before torch's steps wrote their masks and keys in place; since, on an Intel
#: Xeon VM, 1.1-1.4x for DSL and 2.0x for QB-Norm. The least, rounded down, so that no machine
#: loads them too early
RENORM_WEIGHT = 1.0


def prepare(scores: int, threads: int | None = None,
            saving: Callable[[], tuple[float, float | None] | None] | None = None, weight: float = 1.0) -> bool:
    """Before work of ``scores`` scores on ``threads`` CPU threads (default torch's): under
    ``auto``, load and warm the loops once the scores a thread this process has counted, this
    work's included (each ``weight`` times: the loops save ``weight`` times a plain evaluation's
    saving a score, e.g. :data:`RENORM_WEIGHT`), reach :func:`break_even` of ``saving()`` (this
    machine's measurement, read only while the loops are not loaded; None: not measured) and
    numba imports; under ``numba``, always. Done here, before any worker starts, so that no tile
    waits on a compilation. Returns :func:`enabled`."""
    global _counted
    wanted = setting()
    if wanted == "torch":
        return False
    if wanted == "auto" and not _loaded.is_set():
        with _LOCK:
            _counted += scores * weight / (threads or torch.get_num_threads())
            measured = saving() if saving is not None and _counted >= _MEASURED_FROM else None
            if _counted < break_even(measured):
                return False
    return _warm() or wanted == "numba"


def load_seconds() -> float | None:
    """What loading the loops took in this process (import, first calls), or None where this
    process has not loaded them."""
    return _load_seconds


def reload_seconds() -> float | None:
    """What loading the loops takes a later process on this machine, as this one timed it: its
    own loading's seconds where it read them compiled from numba's cache (or where they have no
    cache: every process compiles them); None where this process compiled them into the cache
    or did not load them: a later process reads them there, in a fraction of this one's time
    (~0.5 s against ~3.4 s on an Intel Xeon VM), which this process cannot time."""
    return None if _compiled_into_cache else _load_seconds


_load_seconds: float | None = None
#: whether this process's loading compiled a loop into numba's cache
_compiled_into_cache = False
_loaded = threading.Event()


def _compiled(kernel: Any) -> bool:
    """Whether ``kernel`` (a numba dispatcher) compiled a signature into its cache here."""
    stats = getattr(kernel, "stats", None)
    return stats is not None and stats.cache_path is not None and sum(stats.cache_misses.values()) > 0


def _warm() -> bool:
    """Load the loops and run each once on a tiny tile (numba compiles, or reads its cache, per
    argument types on a first call): True where numba imports."""
    global _load_seconds, _compiled_into_cache
    start = time.perf_counter()
    kernels = _kernels()
    if kernels is None:
        return False
    with _LOCK:
        if not _loaded.is_set():
            for kernel, sample in kernels.values():
                kernel(*sample())
            _load_seconds = time.perf_counter() - start
            _compiled_into_cache = any(_compiled(kernel) for kernel, _ in kernels.values())
            _loaded.set()
    return True


@functools.lru_cache(maxsize=1)
def _kernels() -> dict[str, tuple[Callable[..., None], Callable[[], tuple]]] | None:
    """The compiled loops by name, each with a maker of arguments for a first call on a tiny tile
    (:func:`_warm`), or None where numba does not import."""
    try:
        import numba
    except ImportError:
        return None
    with _LOCK:
        return {name: (_jit(numba, fn), sample) for name, (fn, sample) in _sources().items()}


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

    # the dual softmax's factored keys (renorm_keys.DualSoftmaxKeys) of a tile: its exponents
    # ``s tau2 - c`` (then torch's exp2, whose vector code keeps equal scores' keys equal), then in
    # one read of the scores and their exponentials both directions' keys ``p f`` (``p = e s``,
    # ``f`` the item's factor for text-to-image, the text's for image-to-text) compared and
    # counted as torch's element-wise products would be: each a float32 product rounded once.
    # The per-item and per-text arrays are whole, read from the tile's first item ``a0`` and text ``t0``
    def dsl_exponents(flat, n_rows, n_cols, stride, tau2, shift, out, out_stride):
        for i in range(n_rows):
            row, dst = flat[i * stride:i * stride + n_cols], out[i * out_stride:i * out_stride + n_cols]
            for j in range(n_cols):
                dst[j] = row[j] * tau2 - shift

    def dsl_counts(flat, n_rows, n_cols, stride, exps, exp_stride, a0, t0, item_factor, text_factor,
                   col_thresholds, col_counts, row_thresholds, row_counts):
        t1 = t0 + n_cols
        tf, ct, cc = text_factor[t0:t1], col_thresholds[t0:t1], col_counts[t0:t1]
        for i in range(n_rows):
            row, e = flat[i * stride:i * stride + n_cols], exps[i * exp_stride:i * exp_stride + n_cols]
            f, t, acc = item_factor[a0 + i], row_thresholds[a0 + i], one(0)
            for j in range(n_cols):
                p = e[j] * row[j]
                cc[j] += p * f > ct[j]
                acc += one(p * tf[j] > t)
            row_counts[a0 + i] += acc

    # QB-Norm's tile (renorm_keys.QueryBankChoice) in one read: each direction counted under
    # its raw scores and, with a bank, under the normalised keys ``s beta2 - log2 Z`` (torch's
    # two roundings: the product, then the difference), whose queries' raw top-1s it keeps
    # (update_best's rules, as best_cols / best_rows); whole arrays read from ``a0`` / ``t0``
    def query_bank_counts(flat, n_rows, n_cols, stride, beta2, a0, t0,
                          c_raw, c_raw_counts, c_bank, c_log_z, c_norm, c_norm_counts, c_best, c_index, c_peak, c_at,
                          r_raw, r_raw_counts, r_bank, r_log_z, r_norm, r_norm_counts, r_best, r_index):
        t1 = t0 + n_cols
        cr, crc = c_raw[t0:t1], c_raw_counts[t0:t1]
        if c_bank:
            cn, cnc = c_norm[t0:t1], c_norm_counts[t0:t1]
            for j in range(n_cols):
                c_peak[j], c_at[j] = flat[j], 0
        if r_bank:
            rz = r_log_z[t0:t1]
        for i in range(n_rows):
            row, t, acc = flat[i * stride:i * stride + n_cols], r_raw[a0 + i], one(0)
            if c_bank:
                z = c_log_z[a0 + i]
                for j in range(n_cols):
                    v = row[j]
                    crc[j] += v > cr[j]
                    cnc[j] += v * beta2 - z > cn[j]
                    better = v > c_peak[j]
                    c_peak[j] = v if better else c_peak[j]
                    c_at[j] = i if better else c_at[j]
                    acc += one(v > t)
            else:
                for j in range(n_cols):
                    v = row[j]
                    crc[j] += v > cr[j]
                    acc += one(v > t)
            r_raw_counts[a0 + i] += acc
            if r_bank:
                t, acc, m = r_norm[a0 + i], one(0), row[0]
                for j in range(n_cols):
                    v = row[j]
                    acc += one(v * beta2 - rz[j] > t)
                    m = max(m, v)
                r_norm_counts[a0 + i] += acc
                if m > r_best[a0 + i] or (m == r_best[a0 + i] and r_index[a0 + i] > t0):
                    j = 0
                    while row[j] != m:
                        j += 1
                    r_best[a0 + i], r_index[a0 + i] = m, t0 + j
        if c_bank:
            for j in range(n_cols):
                m = c_peak[j]
                if m > c_best[t0 + j] or (m == c_best[t0 + j] and c_index[t0 + j] > a0):
                    c_best[t0 + j], c_index[t0 + j] = m, a0 + c_at[j]

    # the miner's running lists (hard_negatives): each row's ``depth`` best (score descending,
    # then lower gallery index) with a tile of gallery entries ``c0``.. in index order; a score
    # enters above the list's last (so an equal score of a later index does not) and at most the
    # row's ceiling (the margin's; -inf: nothing enters). Runs of 64 scores are first only
    # counted (a vectorised compare), and read again only where one may enter
    def top_lists(flat, n_rows, n_cols, stride, c0, ceiling, scores, index, depth):
        for i in range(n_rows):
            row, base, cap = flat[i * stride:i * stride + n_cols], i * depth, ceiling[i]
            last = scores[base + depth - 1]
            for j0 in range(0, n_cols, 64):
                run, hits = row[j0:j0 + 64], one(0)  # a slice's loop vectorises; min() bounds do not
                for j in range(len(run)):
                    hits += one(run[j] > last) * one(run[j] <= cap)
                if hits == 0:
                    continue
                for j in range(len(run)):
                    v = run[j]
                    if v > last and v <= cap:
                        p = depth - 1
                        while p > 0 and v > scores[base + p - 1]:
                            scores[base + p], index[base + p] = scores[base + p - 1], index[base + p - 1]
                            p -= 1
                        scores[base + p], index[base + p] = v, c0 + j0 + j
                        last = scores[base + depth - 1]

    def tile() -> np.ndarray:
        return np.zeros(4, np.float32)

    def floats() -> np.ndarray:
        return np.zeros(2, np.float32)

    def ints() -> np.ndarray:
        return np.zeros(2, np.int64)

    def counting() -> tuple:
        return tile(), 2, 2, 2, floats(), floats()

    def top1() -> tuple:
        return tile(), 2, 2, 2, 0, floats(), ints(), floats()

    scalar = np.float32(1)
    return {"rows_gt": (rows_gt, counting), "rows_eq": (rows_eq, counting), "cols_gt": (cols_gt, counting),
            "cols_eq": (cols_eq, counting), "best_rows": (best_rows, top1),
            "best_cols": (best_cols, lambda: (*top1(), ints())),
            "dsl_exponents": (dsl_exponents, lambda: (tile(), 2, 2, 2, scalar, scalar, tile(), 2)),
            "dsl_counts": (dsl_counts, lambda: (tile(), 2, 2, 2, tile(), 2, 0, 0, *(floats() for _ in range(6)))),
            "top_lists": (top_lists, lambda: (tile(), 2, 2, 2, 0, floats(), tile(), np.zeros(4, np.int64), 2)),
            "query_bank_counts": (query_bank_counts, lambda: (
                tile(), 2, 2, 2, scalar, 0, 0, floats(), floats(), True, *(floats() for _ in range(4)), ints(),
                floats(), ints(), floats(), floats(), True, *(floats() for _ in range(4)), ints()))}


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
    kernel = _kernels()[f"{'cols' if dim == 0 else 'rows'}_{_COMPARES[compare]}"][0]
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
    try:
        best_, at = _vector(values), _vector(index, (torch.int64,))
    except _NotTheirs:
        return False
    if len(best_) != (n_cols if dim == 0 else n_rows) or len(at) != len(best_):
        return False
    if n_rows == 0 or n_cols == 0:
        return True
    if (rows := _flat_rows(scores)) is None:
        return False
    kernels = _kernels()
    _loaded.set()
    flat, stride = rows
    if dim == 0:
        kernels["best_cols"][0](flat, n_rows, n_cols, stride, g0, best_, at,
                                np.empty(n_cols, np.float32), np.empty(n_cols, np.int64))
    else:
        kernels["best_rows"][0](flat, n_rows, n_cols, stride, g0, best_, at, scores.amax(1).numpy())
    return True



def _vector(t: torch.Tensor, dtypes: tuple[torch.dtype, ...] = (torch.float32,)) -> np.ndarray:
    """A contiguous 1-D CPU tensor of one of ``dtypes`` as numpy (sharing its memory), else
    :class:`_NotTheirs` (a tensor on an accelerator: its tiles are not the loops')."""
    if t.dtype not in dtypes or t.dim() != 1 or not t.is_contiguous() or not t.is_cpu:
        raise _NotTheirs
    return t.numpy()


class _NotTheirs(Exception):
    """An array the compiled loops do not take (:func:`_vector`)."""


def _counts(t: torch.Tensor) -> np.ndarray:
    return _vector(t, _COUNTS_DTYPES)


#: a channel of the grouped pass for the tile counters: (its thresholds, the next floats below
#: them, the counts added to), whole arrays over the direction's queries
Channel = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
#: a tile counter: (scores (R, C), spare (R, C), first item, first text, whether the tile's items
#: come before its texts' owners) -> whether it counted the tile (else nothing done)
TileCounter = Callable[[torch.Tensor, torch.Tensor | None, int, int, bool], bool]


def _tile_rows(scores: torch.Tensor) -> tuple[np.ndarray, int] | None:
    """:func:`_flat_rows` of a CPU float32 tile, or None (nothing to do: empty; not applicable)."""
    if not scores.is_cpu or scores.dtype != torch.float32 or scores.dim() != 2 or 0 in scores.shape:
        return None
    return _flat_rows(scores)


def dual_softmax_counter(tau2: float, shift: float, factors: tuple[torch.Tensor, torch.Tensor], cols: Channel,
                         rows: Channel, exp2: Callable[[torch.Tensor], object]) -> TileCounter | None:
    """A counter of both directions of a tile under the factored dual-softmax keys
    (:class:`~vlr_plugins.eval.renorm_keys.DualSoftmaxKeys`): two compiled loops, with ``exp2``
    (in place, on the spare buffer: the keys' own exponential) between them; ``cols`` the texts'
    channel (text-to-image keys ``p item_factor``, counted down the columns), ``rows`` the items'
    (image-to-text keys ``p text_factor``, along the rows), ``factors`` = (item factors (N,),
    text factors (M,)). Each key and comparison is the float32 operation torch's element-wise
    steps make, so the counts are theirs. None where numba's loops are not loaded or the arrays
    are not theirs (another device or dtype)."""
    if not enabled():
        return None
    kernels = _kernels()
    exponents, counts = kernels["dsl_exponents"][0], kernels["dsl_counts"][0]
    try:
        item_factor, text_factor = (_vector(f) for f in factors)
        (c_at, c_down, c_counts), (r_at, r_down, r_counts) = ((_vector(a), _vector(b), _counts(c)) for a, b, c in (cols, rows))
    except _NotTheirs:
        return None
    tau2_, shift_ = np.float32(tau2), np.float32(shift)

    def count(scores: torch.Tensor, spare: torch.Tensor | None, a0: int, t0: int, before: bool) -> bool:
        if spare is None or spare.shape != scores.shape or (tile := _tile_rows(scores)) is None:
            return False
        if (out := _flat_rows(spare)) is None:
            return False
        (s, stride), (e, e_stride), (n_rows, n_cols) = tile, out, scores.shape
        exponents(s, n_rows, n_cols, stride, tau2_, shift_, e, e_stride)
        exp2(spare)
        counts(s, n_rows, n_cols, stride, e, e_stride, a0, t0, item_factor, text_factor,
               c_down if before else c_at, c_counts, r_at if before else r_down, r_counts)
        return True

    return count


#: a query bank's side for :func:`query_bank_counter`: (log2 Z over the other side's gallery,
#: the normalised keys' channel, the raw running best of its queries, its index)
BankSide = tuple[torch.Tensor, Channel, torch.Tensor, torch.Tensor]

_NO_FLOATS, _NO_INTS = np.zeros(0, np.float32), np.zeros(0, np.int64)


def query_bank_counter(beta2: float, cols: tuple[Channel, BankSide | None],
                       rows: tuple[Channel, BankSide | None]) -> TileCounter | None:
    """A counter of QB-Norm's channels of a tile (:class:`~vlr_plugins.eval.renorm_keys.QueryBankChoice`)
    in one compiled read of it: ``cols`` for the texts (text-to-image, down the columns), ``rows``
    for the items (image-to-text, along the rows), each (its raw channel, its bank's side or None);
    a bank's side counts the normalised keys ``s beta2 - log2 Z`` (Z of the items for the texts,
    of the texts for the items) and keeps its queries' raw running top-1 as
    :func:`~vlr_plugins.eval.renorm_pass.update_best`. The same float32 keys and comparisons as
    torch's element-wise steps, so the same counts and top-1s. None where numba's loops are not
    loaded or the arrays are not theirs (another device or dtype)."""
    if not enabled():
        return None
    kernel = _kernels()["query_bank_counts"][0]
    no_bank = (False, _NO_FLOATS, _NO_FLOATS, _NO_FLOATS, _NO_FLOATS, _NO_INTS)
    sides = []  # per side: its arguments with the thresholds, with the next floats below them
    try:
        for raw, bank in (cols, rows):
            at, down, counts = _vector(raw[0]), _vector(raw[1]), _counts(raw[2])
            if bank is None:
                sides.append(((at, counts, *no_bank), (down, counts, *no_bank)))
                continue
            log_z, (n_at, n_down, n_counts), best_, index = bank
            z, n_counts, best_, index = _vector(log_z), _counts(n_counts), _vector(best_), _vector(index, (torch.int64,))
            sides.append(((at, counts, True, z, _vector(n_at), n_counts, best_, index),
                          (down, counts, True, z, _vector(n_down), n_counts, best_, index)))
    except _NotTheirs:
        return None
    beta2_, col_bank = np.float32(beta2), cols[1] is not None

    def count(scores: torch.Tensor, spare: torch.Tensor | None, a0: int, t0: int, before: bool) -> bool:
        if (tile := _tile_rows(scores)) is None:
            return False
        (s, stride), (n_rows, n_cols) = tile, scores.shape
        peaks = (np.empty(n_cols, np.float32), np.empty(n_cols, np.int64)) if col_bank else (_NO_FLOATS, _NO_INTS)
        # items before the texts' owners: the texts' counts take >= (the next float below), the items' >
        kernel(s, n_rows, n_cols, stride, beta2_, a0, t0, *sides[0][before], *peaks, *sides[1][not before])
        return True

    return count


def top_lists(tile: torch.Tensor, n_rows: int, c0: int, ceiling: torch.Tensor, scores: torch.Tensor,
              index: torch.Tensor) -> bool:
    """The miner's running lists (:mod:`~vlr_plugins.eval.hard_negatives`) with a tile of
    gallery entries ``c0``.. (positives and padding at -inf) in one compiled read of its first
    ``n_rows`` rows: ``scores`` / ``index`` (R, depth) each row's best so far, score descending,
    then lower gallery index (the tiles come in index order: a later equal score does not enter),
    each at most the row's ``ceiling`` (R,). False (nothing done) where the loops do not apply
    (not enabled, not a CPU float32 tile with unit column stride, lists of another layout)."""
    if not enabled() or (rows := _tile_rows(tile)) is None:
        return False
    depth = scores.shape[1] if scores.dim() == 2 else 0
    try:
        cap, values, at = _vector(ceiling), _vector(scores.view(-1)), _vector(index.view(-1), (torch.int64,))
    except (_NotTheirs, RuntimeError):
        return False
    if depth == 0 or index.shape != scores.shape or len(ceiling) < n_rows or scores.shape[0] < n_rows:
        return False
    flat, stride = rows
    _kernels()["top_lists"][0](flat, min(n_rows, tile.shape[0]), tile.shape[1], stride, c0, cap, values, at, depth)
    return True


def raw_counter(cols: list[Channel], rows: list[Channel]) -> TileCounter | None:
    """A counter of both directions of a tile under the raw scores (the plain engine's grouped
    pass: ``cols`` = [the texts' channel], ``rows`` = [the items']) in one compiled read of it
    (:func:`query_bank_counter` without a bank), instead of a read a direction; None where the
    loops are not loaded or the arrays are not theirs."""
    return query_bank_counter(1.0, (cols[0], None), (rows[0], None))
