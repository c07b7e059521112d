"""The statistics a re-normalisation needs before any rank (:mod:`~vlr_plugins.eval.renorm`),
each from one tiled pass in bounded memory.

* :func:`test_pass`: one pass over the (items x texts) matrix, both directions at once, in the
  tiles of :class:`~vlr_plugins.eval._tiles.ScoreMatrix` (shared among the CPU workers): for the
  dual softmax every item's and every text's log2-sum-exp2 of ``s tau / ln 2``, for QB-Norm every
  query's raw top-1 (the lowest index on ties; only for the row-wise paths: the grouped pass
  finds them itself, with :func:`update_best`).
* :func:`bank_pass`: bank x gallery tiles: ``log2 Z_g`` of every gallery entry and the gallery
  entries in the top k of some bank query (ties: the lower index).

Log-sum-exps, one exponential per score: every score of a pass is shifted by the same constant,
``K = max(0, tau2 - 100)`` (scores are cosines, so ``s tau2 - K <= 100`` and no sum of a tile's
terms overflows float32; for ``tau2 <= 100``, e.g. QB-Norm's default beta of 20, no shift at all, and
no pass to subtract it) and exponentiated in place by the same code wherever it sits
(:func:`~vlr_plugins.eval.renorm_keys.uniform_`); each row and each column of the tile is summed
in float32, the columns over a width padded to whole vectors (:data:`_LANES`: ATen's float32
sum down the columns adds the columns of its vector loop and those of its scalar rest in
different orders, so two equal columns' sums could differ in their last bit; padded, every
column is summed by the vector loop). A row or column whose sum is below :data:`_LEAST_SUM` (its
terms fell far enough below the shift to have lost bits to underflow: its best score is more than
``162 / tau2`` below 1, e.g. below -0.125 at tau = 100; ~never for real embeddings) is summed
again shifted by its own maximum, in float64. Contributions are added in float64 by
``logaddexp2`` in whatever order the workers visit the tiles and the total rounded to float32
once: the order, and the last float64 bit of a merge, shows only when a total lies within ~1e-16
of a float32 rounding boundary; exact duplicates get equal statistics otherwise, since a row's or
column's sums depend on its own scores only.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from vlr_plugins.eval import _count_kernels, _tile_calibration
from vlr_plugins.eval._cpu_blas import tile_product
from vlr_plugins.eval._tile_calibration import STATISTICS
from vlr_plugins.eval._tile_workers import column_tasks, one_thread_per_worker, visit_in_parallel
from vlr_plugins.eval._tiles import DEFAULT_CHUNK_BYTES, ScoreMatrix, UnitRows, exact_matmuls, l2_share, tile_shape
from vlr_plugins.eval.renorm_keys import uniform_, with_slack
from vlr_plugins.eval.row_ranks import gallery_scores, pair_scores, query_and_gallery, rows_per_chunk, top_candidates

__all__ = ["RESOLVE_SHARE", "RunningTop1", "bank_pass", "ensure_share", "merge_best", "normalised_queries",
           "query_lines", "test_pass", "tile_best", "tile_positions", "update_best"]

#: where more than this share of a tile's queries may change their best, it is found for all
_FEW_QUERIES = 0.25
#: the tile maxima :class:`RunningTop1` keeps before merging them
_HELD = 4096
#: an index past every gallery (:class:`RunningTop1`'s merge)
_NO_INDEX = 2**62

_INF = float("inf")
#: the most a shifted score may reach (2^100: a tile's row or column sum stays below 2^128)
_HEADROOM = 100.0
#: a float32 sum at least this large lost nothing that matters to underflow: terms below 2^-126
#: (at most 2^24 of them) weigh less than 2^-38 of it, below float32's and float64's last bits
#: of the merged total
_LEAST_SUM = 2.0 ** -62
#: column sums run over widths that are a multiple of this (ATen's widest vector loop: 4
#: AVX-512 vectors)
_LANES = 64
#: elements per column-sum call with several threads (ATen's grain size: never split)
_SUM_SPAN = 32768


def _lse_rows(shifted: torch.Tensor, work: torch.Tensor, dim: int) -> torch.Tensor:
    """float64 log2-sum-exp2 along ``dim`` of ``work`` (R, C), each row or column shifted by its
    own maximum (the fallback of :func:`shifted_lse`): ``shifted`` is overwritten (its storage
    with :data:`~vlr_plugins.eval.renorm_keys.SLACK`)."""
    peak = work.amax(dim=dim, keepdim=True)
    torch.sub(work, peak, out=shifted)
    uniform_(shifted, "exp2")
    sums = with_slack(shifted.shape[1 - dim], dtype=torch.float64, device=shifted.device)
    torch.sum(shifted, dim, dtype=torch.float64, out=sums) if dim == 0 else sums.copy_(shifted.sum(dim))
    return uniform_(sums, "log2") + peak.squeeze(dim).double()


def padded_width(cols: int) -> int:
    """``cols`` rounded up to whole :data:`_LANES` (the row stride of :func:`shifted_lse`'s tiles)."""
    return -(-cols // _LANES) * _LANES


def lse_shift(scale: float) -> float:
    """The constant every shifted score ``s scale - K`` of a pass is shifted by: ``K`` (0 where the
    scaled scores need none: ``|s scale| <= 100``)."""
    return max(0.0, scale - _HEADROOM)


def shifted_lse(terms: torch.Tensor, shift: float, dims: tuple[int, ...], n_cols: int,
                again: Callable[[int, torch.Tensor], torch.Tensor]) -> list[torch.Tensor]:
    """float64 log2-sum-exp2 along each of ``dims`` of the first ``n_cols`` columns of ``terms``
    (R, W: scores times the scale; W a multiple of :data:`_LANES`, rows contiguous, storage with
    :data:`~vlr_plugins.eval.renorm_keys.SLACK`), which is overwritten in place by
    ``exp2(terms - shift)``. ``again(dim, index)``: the scaled scores once more of the rows
    (``dim`` 1: (len(index), n_cols)) or the columns (``dim`` 0: (R, len(index))) whose sums are
    below :data:`_LEAST_SUM`, summed again with their own maximum (in the order of ``dims``).

    The sums of every dim share one float64 buffer, checked at once (its least and greatest:
    below :data:`_LEAST_SUM`, infinite or NaN send it to the search for the rows or columns to
    sum again) and taken to log2 in one call: the per-tile work outside the exponentials is a
    few ATen calls, not a few per dim."""
    uniform_(terms.sub_(shift) if shift else terms, "exp2")
    sizes = [terms.shape[0] if dim == 1 else n_cols for dim in dims]
    sums = with_slack(sum(sizes), dtype=torch.float64, device=terms.device)
    parts = list(sums.split(sizes))
    for dim, part in zip(dims, parts):
        part.copy_(_sums(terms, dim, n_cols))
    redo: list[torch.Tensor] = []
    if sums.numel():
        least, most = (float(x) for x in sums.aminmax())  # NaN: both NaN, so not "fine"
        if not (least >= _LEAST_SUM and most < _INF):
            redo = [(~(part >= _LEAST_SUM) | ~torch.isfinite(part)).nonzero().flatten() for part in parts]
    uniform_(sums, "log2")
    if shift:
        sums.add_(shift)
    for dim, part, index in zip(dims, parts, redo):
        if len(index):
            rows = again(dim, index).contiguous()
            part[index] = _lse_rows(with_slack(*rows.shape, device=rows.device), rows, dim)
    return parts


def _product(rows: torch.Tensor, cols: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """(R, C) ``rows @ cols.T`` times ``scale``, a new tensor (the rows or columns summed again)."""
    out = tile_product(rows.contiguous(), cols.contiguous(), torch.empty(len(rows), len(cols), device=rows.device))
    return out if scale == 1.0 else out.mul_(scale)


def _sums(terms: torch.Tensor, dim: int, n_cols: int) -> torch.Tensor:
    """float32 sums along ``dim`` of the first ``n_cols`` columns of ``terms`` (R, W); the columns
    summed over all W (whole :data:`_LANES`) in calls that ATen does not split among threads."""
    if dim == 1:
        return terms[:, :n_cols].sum(1)
    rows, width = terms.shape
    if torch.get_num_threads() == 1:
        return terms.sum(0)[:n_cols]
    step = max(_LANES, _SUM_SPAN // max(1, rows) // _LANES * _LANES)
    return torch.cat([part.sum(0) for part in terms.split(step, dim=1)])[:n_cols]


def query_lines(scores: torch.Tensor, dim: int, queries: torch.Tensor) -> torch.Tensor:
    """(len(queries), candidates): the lines of ``queries`` in the tile ``scores`` (R, C) searched
    along ``dim`` (0: its columns, as rows), gathered as rows of ``scores`` or of its transposed
    view: ``index_select`` along the columns of a tile of padded rows copies the whole tile first
    (~1 ms for 1024 x 2050, against ~0.27 ms for 60 columns gathered this way; Intel Xeon)."""
    return (scores if dim == 1 else scores.T).index_select(0, queries)


def merge_best(best: torch.Tensor, arg: torch.Tensor, value: torch.Tensor, index: torch.Tensor) -> None:
    """In place: (best, arg) = (value, index) where value is higher, or equal at a lower index."""
    better = (value > best) | ((value == best) & (index < arg))
    best.copy_(torch.where(better, value, best))
    arg.copy_(torch.where(better, index, arg))


def update_best(scores: torch.Tensor, dim: int, g0: int, best: torch.Tensor, index: torch.Tensor,
                work: torch.Tensor, positions: torch.Tensor) -> None:
    """In place: each query's running (best score, its gallery index) with the tile ``scores``
    (R, C) along ``dim`` (as :func:`tile_best`), the tile's gallery entries starting at ``g0``;
    the lowest index on ties, whatever order the tiles come in, each tile once (no running best
    comes from the tile's own entries: every caller visits a query's tiles once).

    Only the maxima are read everywhere (one pass). The positions are found for the queries
    whose best the tile may change (a higher maximum, or an equal one where the best so far sits
    after the tile's first entry), in their rows or columns alone (``argmax``: the first maximal),
    or for the whole tile with :func:`tile_best` where they are many (a query's first tiles).
    (Their rows or columns gathered as a transposed view's rows and searched with
    :func:`tile_best` was 1.4-4.6x slower for 16 queries of a 256 x 2,048 tile: Zen 4.) Where
    numba's loops are loaded (:mod:`~vlr_plugins.eval._count_kernels`), one compiled loop does it
    by the same rules (:func:`~vlr_plugins.eval._count_kernels.best`)."""
    if _count_kernels.best(scores, dim, g0, best, index):
        return
    value = scores.amax(dim)
    # a query improves with a higher maximum, or an equal one whose running best lies after the
    # tile's first entry and so (the tile's entries not among them) after the whole tile
    improves = torch.where(index > g0, value >= best, value > best)
    maybe = improves.nonzero().flatten()
    if not len(maybe):
        return
    # best = the higher of the two, whichever improves (an equal maximum leaves its value as it is)
    torch.maximum(best, value, out=best)
    if len(maybe) > _FEW_QUERIES * len(value):
        _, at = tile_best(scores, dim, work, positions, value)
        torch.where(improves, at.add_(g0), index, out=index)
    else:
        index[maybe] = query_lines(scores, dim, maybe).argmax(1).add_(g0)


class RunningTop1:
    """Each query's running raw top-1 (``best`` (Q,) its score, ``index`` (Q,) its gallery index,
    updated in place, the lowest index on ties) over the grouped pass's off-diagonal tiles, read
    where a tile may hold it (:meth:`tile`) and merged in batches (:meth:`flush`).

    In an off-diagonal tile a query's top-1 over the whole gallery can lie only where the tile's
    raw count of it is not zero (``reached``: how many of its scores reach its positive's, ``>=``
    where they come before the positive, ``>`` after: the pass's tie rule): that top-1 scores at
    least the positive, and an entry scoring equal to the positive and after it loses the tie. So a
    tile's unreached queries are not read at all; their running bests here may stay below the
    gallery's (the worker that visited the diagonal tile holds the positive: :func:`merge_best`
    takes the best of the workers'). A model that ranks its positives near the top leaves most
    of a tile's queries unreached (benchmarks' near embeddings: 2-4 % reached). Their best score
    and its first position (``max`` along the tile's candidates, which returns the first maximum)
    are kept, and merged into ``best`` / ``index`` every :data:`_HELD` of them: four ATen calls a
    tile instead of :func:`update_best`'s twenty, whose fixed costs (a few us each on a CPU) were
    most of its time (QB-Norm's rank pass, 10K x 50K, one Zen 4 thread: ~110 us a tile, 0.43 s,
    against ~35 us, 0.14 s). Where more than a quarter of a tile's queries are reached, elsewhere
    than a CPU and where numba's loops are loaded, the tile goes to :func:`update_best` whole."""

    def __init__(self, best: torch.Tensor, index: torch.Tensor) -> None:
        self.best, self.index = best, index
        # numba's loop reads a whole tile once (update_best), as do the other devices' ops
        self._whole = best.device.type != "cpu" or _count_kernels.enabled()
        self._pending: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self._held = 0

    def tile(self, scores: torch.Tensor, dim: int, g0: int, q0: int, reached: torch.Tensor,
             work: torch.Tensor, positions: torch.Tensor) -> None:
        """The queries ``q0 ..`` of the tile ``scores`` along ``dim`` (as :func:`update_best`),
        the tile's gallery entries from ``g0``, ``reached`` (Q,) the tile's raw count of each."""
        n = reached.shape[0]
        if not self._whole:
            queries = reached.nonzero().flatten()
            found = queries.shape[0]
            if not found:
                return
            if found <= _FEW_QUERIES * n:
                value, at = query_lines(scores, dim, queries).max(1)
                self._pending.append((queries.add_(q0), value, at.add_(g0)))
                self._held += found
                if self._held >= _HELD:
                    self.flush()
                return
        update_best(scores, dim, g0, self.best[q0:q0 + n], self.index[q0:q0 + n], work, positions)

    def flush(self) -> None:
        """Merge the kept tile maxima into ``best`` / ``index``: each query's highest score, and of
        its equal ones (its running best's included) the lowest index."""
        if not self._pending:
            return
        queries, value, at = (torch.cat(parts) for parts in zip(*self._pending))
        self._pending, self._held = [], 0
        before = self.best[queries]
        self.best.scatter_reduce_(0, queries, value, "amax")
        after = self.best[queries]
        offered = torch.where(value == after, at, _NO_INDEX)
        kept = torch.minimum(offered, self.index[queries])
        offered = torch.where(before == after, kept, offered)  # the running best's index stays a candidate
        self.index[queries] = _NO_INDEX
        self.index.scatter_reduce_(0, queries, offered, "amin")


def tile_positions(n: int, device: torch.device) -> torch.Tensor:
    """float32 1., 2., ..., n: the 1-based positions :func:`tile_best` sums."""
    return torch.arange(1, n + 1, dtype=torch.float32, device=device)


def tile_best(scores: torch.Tensor, dim: int, work: torch.Tensor, positions: torch.Tensor,
              value: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Each query's best score in the tile ``scores`` (R, C) along ``dim`` (0: per column, over
    the rows) and its position there, the lowest on ties. ``work``: (R, C) float32 scratch (it
    may be ``scores`` itself, which is then overwritten); ``positions``: float32 1., 2., 3., ...,
    at least as long as the tile's candidates. ``value``: the maxima, if known.

    ``max`` with indices along the rows of a row-major tile costs ~3 ns per score on CPU
    (a strided reduction), half the product; here: the maxima (``amax``), a 0/1 mask of the
    scores equal to them, and one matrix-vector product, each query's sum of the 1-based
    positions of its maxima, ``P``. With one maximum, ``P - 1`` is its position (exact in
    float32: the sums are integers below 2^24, or past the tile). With several, ``P - 1`` (at
    least the last position plus the first plus 1) lies past the last of them, where the mask
    is 0 or beyond the tile: such a query (exact ties within a tile) is read from its mask row
    (the first 1)."""
    value = scores.amax(dim, keepdim=True) if value is None else value.unsqueeze(dim)
    torch.eq(scores, value, out=work)
    mask = work if dim == 1 else work.T  # (queries, candidates)
    n = mask.shape[1]
    at = torch.mv(mask, positions[:n]).sub_(1).long()
    single = (at < n) & (mask.gather(1, at.clamp(0, n - 1)[:, None]).squeeze(1) == 1)
    several = (~single).nonzero().flatten()
    if len(several):
        at[several] = mask[several].argmax(1)
    return value.flatten(), at


class _Worker:
    def __init__(self, matrix: ScoreMatrix, shape: tuple[int, int], lse: bool, top1: tuple[bool, bool]) -> None:
        device, n, m = matrix.device, matrix.n_items, matrix.n_texts
        self.item_rows = torch.empty(shape[0], matrix.dim, device=device)
        width = padded_width(shape[1])  # rows padded to whole vectors (shifted_lse)
        self.text_rows = torch.zeros(width, matrix.dim, device=device)
        self.scores = with_slack(shape[0], width, device=device)
        self.work = with_slack(*self.scores.shape, device=device)
        self.positions = tile_positions(max(self.scores.shape), device)
        self.loaded, self.n_cols = -1, 0
        self.lse = [torch.full((k,), -_INF, dtype=torch.float64, device=device) for k in (n, m)] if lse else None
        # [text-to-image: each text's best item, image-to-text: each item's best text] as (value, index)
        self.top1 = [(torch.full((k,), -_INF, device=device), torch.full((k,), g, dtype=torch.long, device=device))
                     if wanted else None for wanted, k, g in zip(top1, (m, n), (n, m))]


def test_pass(matrix: ScoreMatrix, tau2: float | None = None, top1: tuple[bool, bool] = (False, False)) -> dict:
    """One pass over every tile. ``tau2``: also ``item_lse`` (N,) and ``text_lse`` (M,), float32
    log2-sum-exp2 of ``s tau2`` over each item's texts and each text's items. ``top1`` =
    (text-to-image, image-to-text): also ``t2i_top1`` (M,) each text's best item and / or
    ``i2t_top1`` (N,) each item's best text (raw scores, lowest index on ties)."""
    if tau2 is not None and any(top1):
        raise ValueError("test_pass: the log-sum-exps and the top-1s come from separate passes")
    n_items, n_texts = matrix.n_items, matrix.n_texts
    ti, tt = matrix.tile_shape_of(STATISTICS)
    n_row_tiles, n_col_tiles = -(-n_items // ti), -(-n_texts // tt)
    shift = None if tau2 is None else lse_shift(tau2)

    def column_part(worker: _Worker, task: tuple[int, range]) -> None:
        col, rows = task
        t0 = col * tt
        if worker.loaded != col:
            worker.n_cols = matrix.texts.load(slice(t0, t0 + tt), worker.text_rows[:tt])
            worker.loaded = col
        for row in rows:
            a0 = row * ti
            n_rows = matrix.items.load(slice(a0, a0 + ti), worker.item_rows)
            if shift is not None:  # the product is s tau2 itself
                worker.item_rows[:n_rows].mul_(tau2)
            scores = tile_product(worker.item_rows, worker.text_rows, worker.scores, new_result_ok=True)
            s, w = scores[:n_rows, :worker.n_cols], worker.work[:n_rows, :worker.n_cols]
            t1, a1 = t0 + worker.n_cols, a0 + n_rows
            if worker.top1[0] is not None:
                update_best(s, 0, a0, worker.top1[0][0][t0:t1], worker.top1[0][1][t0:t1], w, worker.positions)
            if worker.top1[1] is not None:
                update_best(s, 1, t0, worker.top1[1][0][a0:a1], worker.top1[1][1][a0:a1], w, worker.positions)
            if worker.lse is not None:
                item_lse, text_lse = worker.lse
                item_rows, text_rows = worker.item_rows[:n_rows], worker.text_rows[:worker.n_cols]

                def again(dim: int, index: torch.Tensor) -> torch.Tensor:
                    if dim == 1:
                        return _product(item_rows[index], text_rows)
                    return _product(item_rows, text_rows[index])

                rows_lse, cols_lse = shifted_lse(scores[:n_rows], shift, (1, 0), worker.n_cols, again)
                torch.logaddexp2(item_lse[a0:a1], rows_lse, out=item_lse[a0:a1])
                torch.logaddexp2(text_lse[t0:t1], cols_lse, out=text_lse[t0:t1])

    workers = [_Worker(matrix, (ti, tt), tau2 is not None, top1)
               for _ in range(max(1, min(matrix.workers, n_row_tiles * n_col_tiles)))]
    tasks = column_tasks(n_col_tiles, n_row_tiles, len(workers))
    with exact_matmuls(), one_thread_per_worker(len(workers)):
        visit_in_parallel(tasks, column_part, workers)
    first, out = workers[0], {}
    for other in workers[1:]:
        if first.lse is not None:
            for total, part in zip(first.lse, other.lse):
                torch.logaddexp2(total, part, out=total)
        for mine, theirs in zip(first.top1, other.top1):
            if mine is not None:
                merge_best(*mine, *theirs)
    if first.lse is not None:
        out["item_lse"], out["text_lse"] = (lse.float() for lse in first.lse)
    for name, found in zip(("t2i_top1", "i2t_top1"), first.top1):
        if found is not None:
            out[name] = found[1]
    return out


def _merge_top(values: torch.Tensor, index: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's k best of (values, index) (R, C): by value, then by lower index."""
    order = torch.argsort(index, dim=1, stable=True)
    values, index = values.gather(1, order), index.gather(1, order)
    order = torch.argsort(-values, dim=1, stable=True)[:, :k]
    return values.gather(1, order), index.gather(1, order)


def bank_pass(matrix: ScoreMatrix, bank: torch.Tensor, gallery: UnitRows, beta2: float,
              k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(G,) float32 log2 Z_g = log2 sum_b exp2(beta2 s_bg) of every entry of ``gallery`` over the
    queries of ``bank`` (B, D), and (G,) whether the entry is among the ``k`` best (by raw score,
    lower index on ties) of at least one bank query.

    A task is a gallery tile against a run of bank blocks (as :func:`test_pass`'s columns): the
    gallery's rows are loaded once a task, the bank's (fewer a tile) once a tile. Each worker
    keeps every bank query's running top k and every gallery entry's log-sum-exp of the tiles it
    visits; they are merged at the end (ties: the lower index, whatever order the tiles came in)."""
    device, n_gallery = matrix.device, len(gallery)
    queries = UnitRows(bank, device, "the query bank")
    n_queries, k = len(queries), min(k, n_gallery)
    rows, cols = tile_shape(n_queries, n_gallery, max_chunk_bytes=matrix.max_chunk_bytes // matrix.workers,
                            device=device, threads=1 if matrix.workers > 1 else None, kind=STATISTICS)
    n_row_tiles, n_col_tiles = -(-n_queries // rows), -(-n_gallery // cols)
    width, shift = padded_width(cols), lse_shift(beta2)

    class Worker:
        def __init__(self) -> None:
            self.query_rows = torch.empty(rows, matrix.dim, device=device)
            self.gallery_rows = torch.zeros(width, matrix.dim, device=device)  # padded: shifted_lse
            self.scores, self.work = (with_slack(rows, width, device=device) for _ in range(2))
            self.positions = tile_positions(max(rows, cols), device)
            self.log_z = torch.full((n_gallery,), -_INF, dtype=torch.float64, device=device)
            self.best = torch.full((n_queries, k), -_INF, device=device)
            self.best_index = torch.full((n_queries, k), n_gallery, dtype=torch.long, device=device)
            self.loaded, self.n_cols = -1, 0

    def column_part(worker: Worker, task: tuple[int, range]) -> None:
        col, row_tiles = task
        g0 = col * cols
        if worker.loaded != col:
            worker.n_cols = gallery.load(slice(g0, g0 + cols), worker.gallery_rows[:cols])
            worker.loaded = col
        n_cols = worker.n_cols
        gallery_rows = worker.gallery_rows[:n_cols]
        for row_tile in row_tiles:
            b0 = row_tile * rows
            n_rows = queries.load(slice(b0, b0 + rows), worker.query_rows)
            scores = tile_product(worker.query_rows, worker.gallery_rows, worker.scores, new_result_ok=True)
            s, w = scores[:n_rows, :n_cols], worker.work[:n_rows, :n_cols]
            best, best_index = worker.best[b0:b0 + n_rows], worker.best_index[b0:b0 + n_rows]
            if k == 1:  # the official default: no sort
                update_best(s, 1, g0, best[:, 0], best_index[:, 0], w, worker.positions)
            else:
                index = top_candidates(s, min(k, n_cols))
                found = _merge_top(torch.cat([best, s.gather(1, index)], 1),
                                   torch.cat([best_index, index + g0], 1), k)
                best.copy_(found[0])
                best_index.copy_(found[1])
            query_rows = worker.query_rows[:n_rows]
            log_z, = shifted_lse(scores[:n_rows].mul_(beta2), shift, (0,), n_cols,
                                 lambda dim, index: _product(query_rows, gallery_rows[index], beta2))
            g1 = g0 + n_cols
            torch.logaddexp2(worker.log_z[g0:g1], log_z, out=worker.log_z[g0:g1])

    workers = [Worker() for _ in range(max(1, min(matrix.workers, n_row_tiles * n_col_tiles)))]
    tasks = column_tasks(n_col_tiles, n_row_tiles, len(workers))
    with exact_matmuls(), one_thread_per_worker(len(workers)):
        visit_in_parallel(tasks, column_part, workers)
    first = workers[0]
    log_z, best, best_index = first.log_z, first.best, first.best_index
    for other in workers[1:]:
        torch.logaddexp2(log_z, other.log_z, out=log_z)
        if k == 1:
            merge_best(best[:, 0], best_index[:, 0], other.best[:, 0], other.best_index[:, 0])
        else:
            best, best_index = _merge_top(torch.cat([best, other.best], 1), torch.cat([best_index, other.best_index], 1), k)
    active = torch.zeros(n_gallery, dtype=torch.bool, device=device)
    active[best_index.flatten()] = True
    return log_z.float(), active


#: :func:`normalised_queries` answers where the inactive gallery entries are at most this share of
#: the gallery and the queries they leave in doubt at most this share of the queries (their extra
#: products: at most this share of the rank pass's each)
RESOLVE_SHARE = 1 / 16
#: the most rows a block of :func:`normalised_queries`' products takes (fewer where
#: ``max_chunk_bytes`` holds fewer)
_RESOLVE_ROWS = 4096


def _resolve_rows(matrix: ScoreMatrix, width: int) -> int:
    """Rows a block of :func:`normalised_queries` takes: its float32 buffers (two of embedding
    rows, one of ``width`` scores a row) within ``max_chunk_bytes``."""
    return max(1, min(_RESOLVE_ROWS, matrix.max_chunk_bytes // (4 * (2 * matrix.dim + width))))


def _best_positive_scores(matrix: ScoreMatrix, direction: str) -> torch.Tensor:
    """(Q,) float32 raw score of each query's best positive (``"t2i"``: each text's owner;
    ``"i2t"``: each item's best text; -inf for an item without texts), computed a block at a time."""
    texts = matrix.arange(matrix.n_texts)
    scores = torch.cat([pair_scores(matrix, matrix.texts, part, matrix.items, matrix.owner[part])
                        for part in texts.split(_resolve_rows(matrix, 0))])
    if direction == "t2i":
        return scores
    return torch.full((matrix.n_items,), -_INF, device=matrix.device).scatter_reduce_(0, matrix.owner, scores, "amax")


def normalised_queries(matrix: ScoreMatrix, direction: str, active: torch.Tensor) -> torch.Tensor | None:
    """(Q,) which queries of ``direction`` QB-Norm normalises (their raw top-1 over the gallery
    lies in ``active`` (G,), the bank pass's activation set), found before the rank pass; None
    where that would cost more than :data:`RESOLVE_SHARE` allows (the grouped pass then finds
    the top-1s itself: :class:`~vlr_plugins.eval.renorm_keys.QueryBankChoice`).

    A query's top-1 scores at least its best positive. So where its best score over the few
    inactive entries lies below its best positive's, by more than two float32 products of unit
    vectors can differ (``4 D 2^-24``: these scores come from other products than the tiles'),
    its top-1 is active whatever the rest of its row holds. Every other query's top-1 is found
    from its whole row (the lowest index on ties, as the tiles'). With QB-Norm's usual banks
    (training captions, many times the gallery) nearly every entry is active, and the rank pass
    then counts each query under its own key alone."""
    query_side, gallery = query_and_gallery(matrix, direction)
    n_queries = len(query_side)
    normalised = torch.ones(n_queries, dtype=torch.bool, device=matrix.device)
    inactive = (~active).nonzero().flatten()
    if not len(inactive):
        return normalised
    if len(inactive) > RESOLVE_SHARE * len(gallery):
        return None
    best = _best_positive_scores(matrix, direction)
    margin = 4 * matrix.dim * 2.0 ** -24
    inactive_rows = torch.empty(len(inactive), matrix.dim, device=matrix.device)
    gallery.load(inactive, inactive_rows)
    block = _resolve_rows(matrix, len(inactive))
    rows = torch.empty(block, matrix.dim, device=matrix.device)
    scores = torch.empty(block, len(inactive), device=matrix.device)
    doubtful = torch.empty(n_queries, dtype=torch.bool, device=matrix.device)
    with exact_matmuls():
        for q0 in range(0, n_queries, block):
            k = query_side.load(slice(q0, q0 + block), rows)
            top = tile_product(rows[:k], inactive_rows, scores[:k]).amax(1)
            torch.ge(top, best[q0:q0 + k] - margin, out=doubtful[q0:q0 + k])
        doubtful = doubtful.nonzero().flatten()
        if len(doubtful) > RESOLVE_SHARE * n_queries:
            return None
        for part in doubtful.split(rows_per_chunk(matrix, len(gallery), None)):
            normalised[part] = active[gallery_scores(matrix, query_side, part, gallery).argmax(1)]
    return normalised


def _statistics_work(items: torch.Tensor, texts: torch.Tensor, owner: torch.Tensor) -> None:
    """The work :func:`ensure_share` times: DSL's statistics pass (temperature 100, the papers'
    and ``DualSoftmax``'s default) over ``items`` x ``texts`` in tiles of the share in force."""
    matrix = ScoreMatrix(items, texts, owner, device=torch.device("cpu"), max_chunk_bytes=DEFAULT_CHUNK_BYTES)
    test_pass(matrix, tau2=100.0 / math.log(2.0))


def ensure_share(scores: int, device: torch.device) -> None:
    """Before statistics passes over ``scores`` scores (the larger of the matrix and a bank x its
    gallery) on ``device``: on a CPU, this machine's share of their tiles calibrated where it is
    not kept yet and the work is large enough (:func:`~vlr_plugins.eval._tile_calibration.ensure`
    of the :data:`~vlr_plugins.eval._tile_calibration.STATISTICS` kind; ~3 s, once a machine)."""
    if torch.device(device).type == "cpu":
        _tile_calibration.ensure(scores, l2_share(), _statistics_work, kind=STATISTICS)
