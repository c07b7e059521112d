"""Which BLAS computes the engine's float32 tile products on a CPU: torch's (MKL on x86 wheels),
numpy's (OpenBLAS in numpy's wheels) or oneDNN's (in torch's x86 and Arm builds: the fp32 linear
op torch.compile's CPU code calls), whichever is fastest on this machine.

They differ by machine, not by a constant: on an AMD EPYC with AVX-512 (Zen 5) a 1,024 x 256 by
256 x 1,024 product runs at a median ~88 GFLOP/s on one thread in torch's MKL, ~103 in numpy's
OpenBLAS and ~181 in oneDNN (MKL takes a generic path on AMD CPUs); on Intel CPUs MKL is
usually as fast as any. :func:`choice` measures each once on the engine's tile shape (a few
tens of milliseconds) and keeps the answer in a small JSON file per machine
(``$VLR_CACHE_DIR``, else ``$XDG_CACHE_HOME/vlr-plugins``, else ``~/.cache/vlr-plugins``),
keyed by the CPU, torch and numpy, so every later run on the machine takes the same BLAS and
gives the same bits. ``VLR_CPU_BLAS=torch|numpy|onednn|auto`` overrides it (``auto``, the
default: measured).

They round the same dot product differently (so does any one between product shapes):
the engine's exactness never depends on a product's bits matching another product's — a
pass's thresholds and the scores counted against them come from the same kind of tile
product — but it does need equal embeddings to get equal scores wherever they sit within one
product (the tie rule). That holds for MKL's products of at least 2 rows and 8 columns (its
one-row products, a matrix-vector product, and those of fewer columns give the last elements
other bits), and for the others on some CPUs only: on AMD EPYCs (Zen 3 with AVX2, Zen 5 with
AVX-512) numpy's OpenBLAS 0.3.31 gives a row its last-bit-different score at some positions, and
on an Intel Xeon (AVX-512) it does in products of fewer than 128 rows or columns (2 x 127,
17 x 33, ...: its small-matrix kernels). So :func:`tile_product` pads a product of fewer rows or
columns than :data:`_MIN_ROWS` x :data:`_MIN_COLS` with zero rows, and takes torch's for numpy's
below :data:`_LARGE` rows or columns; and numpy's and oneDNN's products are eligible only where
:func:`eligible` finds they give equal rows and columns equal bits at every position of
products of the engine's kinds of shapes (tails included, one thread and two); the
calibration records it, and ``VLR_CPU_BLAS=numpy`` (or ``onednn``) where it fails is refused.
numpy's BLAS threads are limited with ``threadpoolctl`` wherever torch's are
(:func:`~vlr_plugins.eval._tile_workers.one_thread_per_worker`; oneDNN runs on torch's
threads); numpy's products and torch's ops release the GIL, so the engine's worker threads
run them at once.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import platform
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any
from pathlib import Path

import numpy as np
import torch

from vlr_plugins.errors import ConfigError

__all__ = ["blas_threads", "choice", "eligible", "setting", "tile_product"]

_CHOICES = ("torch", "numpy", "onednn")
#: numpy's or oneDNN's product is taken only when at least this much faster (a tie keeps torch's)
_MARGIN = 0.95
#: oneDNN's result is a new tensor, copied into ``out``. One call per tile: in blocks of 256 x 256
#: scores a product cost 15 % more on one thread and the engine ~20 % more on two (each block's
#: call, slices and copy; with the re-normalisations' extra passes ~30 %). Callers that allocate
#: between their products (the miner's merges) ask for these blocks instead
#: (``small_temporaries``): there a whole tile's result (1-2 MiB, above glibc's mmap threshold
#: once it has risen) allocated and freed per tile fragmented the heap (mining's peak memory
#: 2.5-3x at 10K x 50K; in blocks: as with torch's product)
_ONEDNN_BLOCK = 256
#: the version of :func:`_probe_invariant`'s checks a cache entry was probed with (an older
#: entry is measured and probed again: 2 = whole-tile oneDNN calls, tile-sized probe shapes; 3 = only
#: the shapes :func:`tile_product` gives the BLAS probed, numpy's smallest among them)
_PROBE_VERSION = 3
#: the calibration's product: a tile of the engine's shape, one thread
_SHAPE = (1024, 256, 1024)
_ROUNDS = 15
#: the products :func:`_probe_invariant` checks, each for the BLAS :func:`tile_product` gives it to: full
#: tiles, row and column tails (the smallest numpy's BLAS gets among them), and whole tiles as large as
#: the engine's (a calibrated share of up to 2^21 scores)
_PROBE_SHAPES = ((300, 700), (129, 700), (128, 700), (300, 128), (300, 77), (2, 700), (300, 8), (1100, 2300),
                 (723, 1137))
#: the smallest product computed as it is: fewer rows or columns are padded with zero rows to this
#: (on an AVX-512 Xeon MKL gave equal rows and columns equal bits at every position of every product
#: of 2-24 x 8-129 and larger, one thread and two, and not in one-row or fewer-column ones)
_MIN_ROWS, _MIN_COLS = 2, 8
#: numpy's products of fewer rows or columns than this are torch's (OpenBLAS' small-matrix kernels)
_LARGE = 128
#: the seeds of the probe's values (each: 1,100 + 2,300 rows, duplicates at strided positions)
_PROBE_SEEDS = (3, 4)


def _cache_file() -> Path:
    root = os.environ.get("VLR_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "vlr-plugins")
    return Path(root) / "cpu-blas.json"


def _machine_key() -> str:
    """The CPU's model and vector extensions (``/proc/cpuinfo``'s first processor), torch and numpy."""
    model, flags = None, ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "model name" and model is None:
                model = value.strip()
            elif name.strip() == "flags":
                flags = " ".join(sorted(f for f in value.split() if f.startswith(("avx", "fma", "amx"))))
                break
    except OSError:
        pass
    model = model or platform.processor() or platform.machine()
    return f"{model} [{flags}] torch {torch.__version__} numpy {np.__version__}"


def _measure() -> dict[str, float]:
    """Median seconds per product of each available BLAS on one thread, over :data:`_ROUNDS`
    rounds that alternate them (a BLAS's fastest call can be far from its usual one: MKL's on AMD)."""
    m, k, n = _SHAPE
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(m, k, generator=generator), torch.randn(n, k, generator=generator)
    out = torch.empty(m, n)
    times: dict[str, list[float]] = {name: [] for name in _CHOICES if _available(name)}
    with blas_threads(1):
        for name in times:  # warm-up
            _product(name, a, b, out)
        for _ in range(_ROUNDS):
            for name in times:
                start = time.perf_counter()
                _product(name, a, b, out)
                times[name].append(time.perf_counter() - start)
    return {name: sorted(t)[len(t) // 2] for name, t in times.items()}


def _read_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_cache(path: Path, data: dict) -> None:
    """Atomically (:func:`~vlr_plugins._io.atomic_write_json`); a cache that cannot be written is skipped."""
    from vlr_plugins._io import atomic_write_json

    try:
        atomic_write_json(path, data)
    except OSError:
        pass


@functools.lru_cache(maxsize=None)
def _available(name: str) -> bool:
    """Whether ``name``'s product runs in this torch build (oneDNN's: an x86 or Arm build with
    oneDNN, whose fp32 linear op is there and computes a product right)."""
    if name != "onednn":
        return True
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    try:
        a, b = torch.arange(6.0).view(2, 3), torch.arange(12.0).view(4, 3)
        out = torch.empty(2, 4)
        _product("onednn", a, b, out)
        return bool(torch.equal(out, a @ b.T))
    except (RuntimeError, NotImplementedError):
        return False


def _probe_invariant(name: str) -> bool:
    """Whether ``name``'s BLAS gives equal rows (and equal columns) equal bits wherever they sit
    in a product: duplicates at strided positions of each of :data:`_PROBE_SHAPES` that
    :func:`tile_product` gives to ``name``'s BLAS, on one thread and on two, oneDNN's in whole
    calls and in small blocks, over :data:`_PROBE_SEEDS`'s values (~0.1 s). Whether a BLAS breaks the rule depends on the values: numpy's OpenBLAS on an
    AMD Zen 5 broke it at every shape for 11 of 12 seeds and at none for the twelfth."""
    if not _available(name):
        return False
    rows, cols = (max(shape) for shape in zip(*_PROBE_SHAPES))
    for seed in _PROBE_SEEDS:
        generator = torch.Generator().manual_seed(seed)
        a, b = torch.randn(300, 256, generator=generator), torch.randn(700, 256, generator=generator)
        a = torch.cat([a, torch.randn(rows - len(a), 256, generator=generator)])
        b = torch.cat([b, torch.randn(cols - len(b), 256, generator=generator)])
        a[::37] = a[5].clone()
        b[::41] = b[3].clone()
        for threads in (1, 2):
            with blas_threads(threads):
                for (r, c), small in itertools.product(_PROBE_SHAPES, (False, True) if name == "onednn" else (False,)):
                    if _blas_for(name, r, c) != name:
                        continue
                    out = torch.empty(r, c)
                    _product(name, a[:r], b[:c], out, small)
                    block = out[::37, ::41]
                    if not bool((block == block.flatten()[0]).all()):
                        return False
    return True


#: how deep this thread is in :func:`_cache_lock` (a nested call holds the lock already)
_held = threading.local()


@contextlib.contextmanager
def _cache_lock(path: Path) -> Iterator[None]:
    """The cache file's lock (``filelock``), held while a calibration measures and writes, so that
    processes started at once on a machine (torchrun's, test workers) measure once and all read
    the same answer; re-entrant within a thread; where the folder cannot be made, none (each
    process measures for itself)."""
    from filelock import FileLock, Timeout

    depth = getattr(_held, "depth", 0)
    if depth:
        _held.depth = depth + 1
        try:
            yield
        finally:
            _held.depth = depth
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path) + ".lock", timeout=300)
        lock.acquire()
    except (OSError, Timeout):
        yield
        return
    _held.depth = 1
    try:
        yield
    finally:
        _held.depth = 0
        lock.release()


def _valid_entry(entry: object) -> bool:
    eligible = entry.get("eligible") if isinstance(entry, dict) else None
    return (isinstance(entry, dict) and entry.get("choice") in _CHOICES and isinstance(eligible, dict)
            and entry.get("probe") == _PROBE_VERSION
            and all(isinstance(eligible.get(name), bool) for name in _CHOICES[1:]))


@functools.lru_cache(maxsize=None)
def _machine_entry() -> dict:
    """This machine's cache entry (measured and probed once, then read): ``choice``,
    ``eligible`` (numpy's and oneDNN's products, see :func:`eligible`), ``seconds``, ``shape``,
    and once the tiles are calibrated ``tile_elems`` (:mod:`~vlr_plugins.eval._tile_calibration`).
    An entry written before oneDNN's product was a choice, or probed by older checks
    (:data:`_PROBE_VERSION`), is measured again."""
    path, key = _cache_file(), _machine_key()
    entry = _read_cache(path).get(key)
    if _valid_entry(entry):
        return entry
    with _cache_lock(path):
        data = _read_cache(path)  # another process may have measured meanwhile
        entry = data.get(key)
        if _valid_entry(entry):
            return entry
        seconds = _measure()
        ok = {name: _probe_invariant(name) for name in _CHOICES[1:]}
        pick = min((name for name in _CHOICES[1:] if ok[name] and seconds[name] < _MARGIN * seconds["torch"]),
                   key=seconds.__getitem__, default="torch")
        data[key] = entry = {"choice": pick, "eligible": ok, "seconds": seconds, "shape": list(_SHAPE),
                             "probe": _PROBE_VERSION}
        _write_cache(path, data)
    return entry


def _calibrated() -> str:
    return _machine_entry()["choice"]


def eligible(name: str) -> bool:
    """Whether the engine may take ``name``'s products on this machine (probed once, cached with
    the calibration): torch's always; numpy's and oneDNN's where they run and give equal
    embeddings equal scores wherever they sit in a product."""
    return name == "torch" or bool(_machine_entry()["eligible"].get(name))


def setting() -> str:
    """``VLR_CPU_BLAS`` as given: ``torch``, ``numpy``, ``onednn`` or ``auto`` (the default); a
    :class:`~vlr_plugins.errors.ConfigError` naming it otherwise (commands check it up front)."""
    wanted = os.environ.get("VLR_CPU_BLAS", "auto").strip().lower() or "auto"
    if wanted not in (*_CHOICES, "auto"):
        raise ConfigError(f"VLR_CPU_BLAS={wanted!r}: expected one of torch, numpy, onednn, auto (the BLAS of "
                          "the retrieval engine's CPU tile products)")
    if wanted != "torch" and wanted in _CHOICES and not eligible(wanted):
        what = (f"numpy's BLAS (numpy {np.__version__})" if wanted == "numpy"
                else f"oneDNN's fp32 product (torch {torch.__version__})")
        if not _available(wanted):
            raise ConfigError(f"VLR_CPU_BLAS={wanted}: {what} is not in this torch build; use torch or auto")
        raise ConfigError(f"VLR_CPU_BLAS={wanted}: {what} gives equal embeddings different scores depending on "
                          "where they sit in a product on this CPU, and the engine's exact tie rule needs equal "
                          "scores; use torch or auto (which does not take it here)")
    return wanted


def choice() -> str:
    """``"torch"`` or ``"numpy"``: the BLAS of CPU float32 tile products (see the module)."""
    wanted = setting()
    return wanted if wanted in _CHOICES else _calibrated()


def _onednn(rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """oneDNN's fp32 linear (the op torch.compile's CPU code calls): ``rows @ cols.T``, a new tensor."""
    return torch.ops.mkldnn._linear_pointwise(rows, cols, None, "none", [], "")


def _product(name: str, rows: torch.Tensor, cols: torch.Tensor, out: torch.Tensor,
             small_temporaries: bool = False) -> None:
    if name == "numpy":
        np.matmul(rows.numpy(), cols.numpy().T, out=out.numpy())
    elif name == "onednn" and not small_temporaries:
        out.copy_(_onednn(rows, cols))
    elif name == "onednn":  # in blocks of _ONEDNN_BLOCK x _ONEDNN_BLOCK scores
        step = _ONEDNN_BLOCK
        for r in range(0, len(rows), step):
            for c in range(0, len(cols), step):
                out[r:r + step, c:c + step].copy_(_onednn(rows[r:r + step], cols[c:c + step]))
    else:
        torch.mm(rows, cols.T, out=out)


def tile_product(rows: torch.Tensor, cols: torch.Tensor, out: torch.Tensor, *,
                 small_temporaries: bool = False, new_result_ok: bool = False) -> torch.Tensor:
    """``out = rows @ cols.T`` (rows (R, D), cols (C, D), out (R, C)): for float32 CPU tensors in
    the BLAS :func:`choice` says (numpy's: zero-copy views of the same memory; oneDNN's), else
    torch's. ``small_temporaries``: oneDNN's product in blocks of :data:`_ONEDNN_BLOCK` squared
    scores rather than one call (for callers that allocate between products). ``new_result_ok``:
    oneDNN's product is returned as it comes, a new contiguous (R, C) tensor, rather than copied
    into ``out`` (the copy costs ~5 % of the product); the caller reads the returned tensor.

    On a CPU every product gives equal rows (and equal columns) of its operands equal bits
    wherever they sit, so that equal embeddings tie (the engine's tie rule): one of fewer than
    :data:`_MIN_ROWS` rows or :data:`_MIN_COLS` columns is computed padded with zero rows (a
    matrix-vector product's last elements differ otherwise), and numpy's BLAS multiplies only
    products of at least :data:`_LARGE` rows and columns (torch's the others)."""
    if out.device.type != "cpu" or rows.requires_grad or cols.requires_grad:
        return torch.mm(rows, cols.T, out=out)
    if len(rows) < _MIN_ROWS or len(cols) < _MIN_COLS:  # a matrix-vector product or nearly: padded
        return out.copy_(torch.mm(_at_least(rows, _MIN_ROWS), _at_least(cols, _MIN_COLS).T)[:len(rows), :len(cols)])
    name = _blas_for(choice(), len(rows), len(cols)) if rows.dtype == cols.dtype == out.dtype == torch.float32 \
        else "torch"
    if name == "torch":
        return torch.mm(rows, cols.T, out=out)
    if new_result_ok and name == "onednn" and not small_temporaries:
        return _onednn(rows, cols)
    _product(name, rows, cols, out, small_temporaries)
    return out


def _blas_for(name: str, rows: int, cols: int) -> str:
    """The BLAS that multiplies a ``rows`` x ``cols`` float32 product of at least :data:`_MIN_ROWS` x
    :data:`_MIN_COLS` when ``name``'s is chosen: numpy's only from :data:`_LARGE` rows and columns."""
    return "torch" if name == "numpy" and min(rows, cols) < _LARGE else name


def _at_least(t: torch.Tensor, n: int) -> torch.Tensor:
    """``t`` (k, D) with zero rows after it up to n rows (``t`` itself when k >= n)."""
    return t if len(t) >= n else torch.cat([t, t.new_zeros(n - len(t), *t.shape[1:])])


@contextlib.contextmanager
def blas_threads(threads: int) -> Iterator[None]:
    """numpy's BLAS (and torch's intra-op threads) limited to ``threads`` inside; restored on exit."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with _threadpools().limit(limits=threads, user_api="blas"):
            yield
    finally:
        torch.set_num_threads(before)


_POOLS: tuple[int, Any] = (-1, None)  # (len(sys.modules) when found, threadpoolctl's controller)


def _threadpools() -> Any:
    """threadpoolctl's view of the loaded BLAS libraries. Finding them reads the process's memory
    map (~1.5 ms, which each matrix-vector tile product would otherwise pay), so the view is kept
    until a module is imported: BLAS libraries arrive with extension modules (numpy's, scipy's,
    faiss's), and one loaded after the view was taken would otherwise keep its threads."""
    global _POOLS
    found, pools = _POOLS
    if found != len(sys.modules):
        from threadpoolctl import ThreadpoolController

        pools = ThreadpoolController()
        _POOLS = (len(sys.modules), pools)  # threadpoolctl's own first import counts too
    return pools
