"""What every rank computation of :func:`~vlr_plugins.eval.retrieval_recall` shares: the
(items x texts) score matrix as tiles of one shape, unit rows loaded into tile buffers,
the count-above kernel, and float32 products kept exact.

The score matrix never exists whole. :class:`ScoreMatrix` holds both sides' embeddings,
the owner of every text and the tile shape; a tile is ``tile_items`` items x ``tile_texts``
texts, zero-padded at the edges, and one tile plus one work buffer of the same shape fit
in ``max_chunk_bytes`` (:func:`tile_shape`).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from vlr_plugins.eval._count_kernels import count as count_kernel
from vlr_plugins.eval._tile_calibration import CALIBRATE_FROM, ENGINE, STATISTICS, per_thread
from vlr_plugins.eval._tile_workers import tile_workers

#: the memory a retrieval's tiles take at most by default (``retrieval_recall``'s ``max_chunk_bytes``)
DEFAULT_CHUNK_BYTES = 256 * 2**20
#: bytes per element of a tile: the score tile (<= 4 bytes) and its float32 work buffer
BYTES_PER_TILE_ELEM = 8
_DEFAULT_L2_BYTES = 2 * 2**20  # where the OS does not say (the L2 of the machine the rule was measured on)
_NORM_ROWS = 4096  # rows normalised at a time, so that no whole float32 copy is made


def tile_shape(n_items: int, n_texts: int, *, max_chunk_bytes: int, device: torch.device,
               chunk_size: int | None = None, threads: int | None = None, kind: str = ENGINE) -> tuple[int, int]:
    """(items, texts) per tile: a tile and its work buffer take at most ``max_chunk_bytes``;
    on CPU also at most :func:`cpu_tile_elems_per_thread` elements per thread (``threads``,
    default ``torch.get_num_threads()``; of ``kind``'s work), so that each thread's share of the element-wise
    passes stay near its core's caches while their fixed costs are amortised. ``chunk_size``
    fixes the items per tile (within the budget).

    The engine's tiles are 8 times as wide as they are tall; the statistics passes' (``kind``
    :data:`~vlr_plugins.eval._tile_calibration.STATISTICS`: a product, exponentials and sums of
    larger tiles) square, the fewest embedding rows for their scores: QB-Norm's bank pass at 10K x
    50K 4-8 % faster than at 8 : 1 (360 x 2,500 -> 1,021 x 1,000), DSL's statistics pass 1-5 %
    (Zen 4, one and two threads, docs/benchmarks.md)."""
    tile_elems = tile_budget(max_chunk_bytes=max_chunk_bytes, device=device, threads=threads,
                             scores=n_items * n_texts, kind=kind)
    if chunk_size is not None:
        tile_items = max(1, min(chunk_size, n_items, tile_elems))
    else:  # the engine's 8 times as wide as tall, the statistics passes' square; evened out so that
        # the last tile is not mostly padding
        aspect = 1 if kind == STATISTICS else 8
        tile_items = even_split(n_items, max(1, min(math.isqrt(tile_elems // aspect), n_items)))
    tile_texts = max(1, min(n_texts, tile_elems // tile_items))
    return tile_items, even_split(n_texts, tile_texts)


def tile_budget(*, max_chunk_bytes: int, device: torch.device, threads: int | None = None,
                scores: int | None = None, kind: str = ENGINE) -> int:
    """Score elements one tile may hold: a tile and its work buffer within ``max_chunk_bytes``,
    and on CPU at most :func:`cpu_tile_elems_per_thread` per thread (``threads``, default
    ``torch.get_num_threads()``) for ``kind``'s work of ``scores`` scores."""
    tile_elems = max(1, max_chunk_bytes // BYTES_PER_TILE_ELEM)
    if torch.device(device).type == "cpu":
        tile_elems = min(tile_elems, cpu_tile_elems_per_thread(scores, kind) * (threads or torch.get_num_threads()))
    return tile_elems


def l2_cache_bytes(cpu: int = 0) -> int | None:
    """The L2 cache of logical CPU ``cpu`` in bytes, as Linux reports it (sysfs), or ``None``."""
    root = Path(f"/sys/devices/system/cpu/cpu{cpu}/cache")
    try:
        for index in sorted(root.glob("index*")):
            if (index / "level").read_text().strip() == "2" and \
                    (index / "type").read_text().strip() in ("Unified", "Data"):
                size = (index / "size").read_text().strip()
                unit = {"K": 2**10, "M": 2**20}.get(size[-1:].upper(), 1)
                return int(size.rstrip("KkMm")) * unit
    except (OSError, ValueError):
        return None
    return None


def elems_for_l2(l2_bytes: int | None) -> int:
    """Score elements per thread for a core with ``l2_bytes`` of L2: as many float32 scores as
    the L2 holds (the tile's work buffer, which each element-wise pass reads and writes, then
    stays near it), within [64 Ki, 2 Mi] elements; ``None`` (unknown): a 2 MiB L2. On the
    Intel Xeon of docs/benchmarks.md (2 MiB L2) this is the measured 4 MiB a thread
    (tile + buffer); on a Zen 3 core (512 KiB L2), 1 MiB."""
    l2 = l2_bytes if l2_bytes and l2_bytes > 0 else _DEFAULT_L2_BYTES
    return min(max(l2 // 4, 2**16), 2**21)


@functools.lru_cache(maxsize=1)
def l2_share() -> int:
    """:func:`elems_for_l2` of this machine's L2 (read once): the share of the L2 rule."""
    return elems_for_l2(l2_cache_bytes())


def cpu_tile_elems_per_thread(scores: int | None = None, kind: str = ENGINE) -> int:
    """Scores per thread of a CPU tile for work of ``scores`` scores: from
    :data:`~vlr_plugins.eval._tile_calibration.CALIBRATE_FROM` scores on, the share calibrated
    for this machine and tile BLAS (:mod:`~vlr_plugins.eval._tile_calibration`: the fastest
    measured share where it beats :func:`l2_share`'s; ``retrieval_recall`` calibrates first where
    none is kept), below it (or unknown, or not calibrated) :func:`l2_share`; or as
    ``VLR_CPU_TILE_ELEMS`` says (``l2``: :func:`l2_share`; a number). ``kind``: the tile work's
    (:data:`~vlr_plugins.eval._tile_calibration.STATISTICS`: a re-normalisation's statistics passes)."""
    return per_thread(l2_share(), calibrate=scores is not None and scores >= CALIBRATE_FROM, kind=kind)


def even_split(total: int, most: int) -> int:
    """The smallest piece size that covers ``total`` in as few pieces as size ``most`` does."""
    pieces = -(-total // most)
    return -(-total // pieces)


@contextlib.contextmanager
def exact_matmuls() -> Iterator[None]:
    """float32 products in float32 (no TF32), half-precision products summed in float32;
    the global settings are restored on exit."""
    precision = torch.get_float32_matmul_precision()
    cuda = torch.backends.cuda.matmul
    flags = (cuda.allow_fp16_reduced_precision_reduction, cuda.allow_bf16_reduced_precision_reduction)
    if precision != "highest":
        torch.set_float32_matmul_precision("highest")
    cuda.allow_fp16_reduced_precision_reduction = cuda.allow_bf16_reduced_precision_reduction = False
    try:
        yield
    finally:
        if precision != "highest":
            torch.set_float32_matmul_precision(precision)
        cuda.allow_fp16_reduced_precision_reduction, cuda.allow_bf16_reduced_precision_reduction = flags


def count_above(scores: torch.Tensor, thresholds: torch.Tensor, work: torch.Tensor, dim: int,
                counts: torch.Tensor, ones: torch.Tensor,
                compare: Callable[..., torch.Tensor] = torch.gt) -> None:
    """counts += how many ``compare(scores, thresholds)`` hold along ``dim``.

    scores: (R, C); thresholds: (C,) with ``dim=0`` (one per column, counts (C,)) or (R, 1)
    with ``dim=1`` (one per row, counts (R,)); work: (R, C) float32 (``scores`` itself where
    they are not needed after: the mask is then written over them); ones: at least
    max(R, C) ones. On a CPU with numba, float32 tiles are counted by one compiled loop
    (:mod:`~vlr_plugins.eval._count_kernels`; ``work`` unused); otherwise the comparison is
    written as a 0/1 float mask (the fastest comparison output in torch on CPU) and summed by
    a matrix-vector product with ``ones``. Either way exact while the counts stay below 2^24
    in float32 (2^53 in float64).
    """
    if count_kernel(scores, thresholds, dim, counts, compare):
        return
    compare(scores, thresholds, out=work)
    mask = work if dim == 1 else work.T
    if ones.shape[0] != mask.shape[1]:
        ones = ones[:mask.shape[1]]
    if counts.dtype == mask.dtype:
        counts.addmv_(mask, ones)
    else:
        counts += torch.mv(mask, ones)


def count_accumulators(n_items: int, n_texts: int, device: torch.device) -> list[torch.Tensor]:
    """Zeroed counts (N,) and (M,), float32 while every count fits exactly, else float64."""
    dtype = torch.float32 if max(n_items, n_texts) < 2**24 else torch.float64
    return [torch.zeros(k, dtype=dtype, device=device) for k in (n_items, n_texts)]


class UnitRows:
    """One side's embeddings (K, D) on ``device``, loaded into tile buffers with unit norm.

    Norms are computed in float32 a block of rows at a time, so the embeddings are never
    copied whole in float32. A row that is not finite (its norm NaN or infinite) is a
    ``ValueError`` naming ``name`` and the row: its pairs' scores would be NaN and every rank
    that meets them undefined.
    """

    def __init__(self, emb: torch.Tensor, device: torch.device, name: str = "embeddings"):
        self.emb = emb.to(device)
        self.norm = torch.empty(len(emb), device=device)
        for start in range(0, len(emb), _NORM_ROWS):
            block = self.emb[start:start + _NORM_ROWS].float()
            self.norm[start:start + _NORM_ROWS] = torch.linalg.vector_norm(block, dim=1)
        if len(emb) and not bool(torch.isfinite(self.norm).all()):
            row = int((~torch.isfinite(self.norm)).nonzero()[0])
            raise ValueError(f"{name}: row {row} of {len(emb)} is not finite (NaN or inf, or its float32 norm "
                             "overflows): the scores of its pairs would be NaN")
        self.norm.clamp_min_(1e-12)  # as F.normalize

    def __len__(self) -> int:
        return len(self.emb)

    def load(self, rows: slice | torch.Tensor, out: torch.Tensor) -> int:
        """Rows ``rows`` (a slice or an index tensor, k of them) with unit norm into
        out[:k], zeros after; out: (R >= k, D) of any float dtype. Returns k."""
        unit, norm = self.emb[rows].float(), self.norm[rows].unsqueeze(1)
        k = len(unit)
        if out.dtype == torch.float32:
            torch.div(unit, norm, out=out[:k])
        else:
            out[:k] = unit / norm
        out[k:].zero_()
        return k


class ScoreMatrix:
    """The (N items x M texts) cosine-score matrix, visited a tile at a time.

    item_emb: (N, D), text_emb: (M, D), text_owner: (M,) the item of each text. Holds
    both sides as :class:`UnitRows`, the owners, the texts grouped by owner (the texts of
    item i are ``texts_by_owner[first_text[i]:first_text[i + 1]]``), the number of workers
    that visit tiles at once (``workers``: on CPU up to one per torch thread, see
    :mod:`~vlr_plugins.eval._tile_workers`; 1 elsewhere) and the shape of one worker's tile
    (``tile_items`` x ``tile_texts``: the budget shared among the workers).
    """

    def __init__(self, item_emb: torch.Tensor, text_emb: torch.Tensor, text_owner: torch.Tensor, *,
                 device: torch.device, max_chunk_bytes: int, chunk_size: int | None = None):
        self.items, self.texts = UnitRows(item_emb, device, "item_emb"), UnitRows(text_emb, device, "text_emb")
        self.n_items, self.n_texts, self.dim = len(item_emb), len(text_emb), item_emb.shape[1]
        self.device, self.max_chunk_bytes, self.chunk_size = device, max_chunk_bytes, chunk_size
        # on CPU the tiles are shared among workers (_tile_workers): each gets a share of the budget
        scores = self.n_items * self.n_texts
        self.workers = tile_workers(tile_budget(max_chunk_bytes=max_chunk_bytes, device=device, scores=scores),
                                    device)
        self.tile_items, self.tile_texts = self.tile_shape_of(ENGINE)
        self.owner = text_owner.to(device, torch.long)
        self.texts_by_owner = torch.argsort(self.owner, stable=True)
        self.first_text = torch.searchsorted(self.owner[self.texts_by_owner],
                                             torch.arange(self.n_items + 1, device=device))

    def tile_shape_of(self, kind: str) -> tuple[int, int]:
        """(items, texts) of one worker's tile for ``kind``'s work over this matrix (as
        ``tile_items`` x ``tile_texts`` are the engine's): the same workers, budget and ``chunk_size``."""
        return tile_shape(self.n_items, self.n_texts, device=self.device, max_chunk_bytes=self.max_chunk_bytes // self.workers,
                          chunk_size=self.chunk_size, threads=1 if self.workers > 1 else None, kind=kind)

    def tile_buffers(self, dtype: torch.dtype = torch.float32
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Empty buffers in ``dtype``: item rows (tile_items, D), text rows (tile_texts, D)
        and their scores (tile_items, tile_texts)."""
        def new(*shape: int) -> torch.Tensor:
            return torch.empty(*shape, device=self.device, dtype=dtype)

        rows, cols = self.tile_items, self.tile_texts
        return new(rows, self.dim), new(cols, self.dim), new(rows, cols)

    def arange(self, k: int) -> torch.Tensor:
        """0, ..., k - 1 on the matrix's device."""
        return torch.arange(k, device=self.device)
