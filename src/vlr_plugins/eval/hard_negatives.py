"""Exact hard-negative mining: every query's top-scoring gallery entries that are not its
positives, in a rank window, in memory bounded independently of the gallery size.

The (queries x gallery) cosine-score matrix is visited a tile at a time (tiles of
:func:`~vlr_plugins.eval._tiles.tile_shape`, every product of the same full, zero-padded
shape). A block of queries walks the gallery tiles in index order, keeping for each query
a running list of its best ``L = range_min + k`` candidates (at most ``range_max``),
ordered by score descending, ties by lower gallery index. A tile is reduced to the few
blocks of columns (:meth:`_Miner.block_maxima`) whose maximum reaches the row's floor,
and only those are read; they are held and merged into the lists once a tile's worth of
scores is held, or at the block's end (one sort per merge, not per tile). The floor is a
lower bound of what can still enter: a value that L distinct admissible scores seen so
far reach (the L-th largest of block maxima, refreshed at tiles 1, 2, 4, 8, ..., the
maxima of the tiles between pooled element-wise per block column, so that each pooled
value is still a score of its own), and, once lists are merged, just above a full
list's last score (the tiles come in index order, so on a tie the listed, lower index
wins). Memory: O(Q * L) for the lists plus, per worker, one tile and under two tiles'
worth of held scores (and their copy while merged). On CPU the query blocks
are shared among the tile workers (:mod:`~vlr_plugins.eval._tile_workers`), each owning
whole blocks, so nothing is merged across workers.

Where numba's loops are loaded (:mod:`~vlr_plugins.eval._count_kernels`: ``VLR_COUNT_KERNEL=numba``,
or ``auto`` once the process's work has repaid the loading, e.g. at COCO-train size) the lists
are kept by one compiled read of each tile instead (:func:`~vlr_plugins.eval._count_kernels.top_lists`:
runs of 64 scores compared with the list's last score and the ceiling, the few that may enter
inserted in order): no block maxima, nothing held, no merges; the same lists by the same rules.

Margin (false-negative guard). With ``margin`` set, a candidate with float32 score ``s``
is kept only when ``s <= p - margin`` evaluated exactly (``p - margin`` in float64, then
rounded down to float32, which for a float32 ``s`` is the same test), ``p`` being the
query's lowest positive score. ``p`` must be the very float32 the candidates' tiles would
give that pair: the positives' scores are computed first in products of the tile's shape
(the positives' rows gathered into a gallery tile), and every positive's score is read
again from the main pass's tile where it lies. A query where the two differ in any bit is
mined again in a block of its own whose positives are scored in the main pass's own
tiles first (two identical products), so the threshold and the candidates always come
from the same computation.

Against sentence-transformers' ``mine_hard_negatives`` (6.2): its ``range_min`` /
``range_max`` are ranks among the candidates left once positives (and margin / score
filters) are removed, within the raw top ``range_max + max_positives`` of the whole
corpus; here the window is over the whole filtered order, so with a margin a query still
gets negatives ranked below the raw top ``range_max + max_positives``. Its margin
removes ``s + margin > p`` in float32 (rounded), here ``s <= p - margin`` is exact. It
raises when ``num_negatives`` exceeds the window; here fewer than ``k`` are returned
(``-1`` / nan), and ``counts`` says how many. Its ``torch.topk`` orders exact ties
arbitrarily; here by lower gallery index.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from vlr_plugins.eval import _count_kernels, _tile_calibration
from vlr_plugins.eval._cpu_blas import tile_product
from vlr_plugins.eval._tile_workers import one_thread_per_worker, tile_workers, visit_in_parallel
from vlr_plugins.eval._tiles import BYTES_PER_TILE_ELEM, UnitRows, exact_matmuls, tile_budget

__all__ = ["MIN_BLOCKS", "MinedNegatives", "mine_hard_negatives", "positives_csr"]

#: the fewest blocks a tile row is cut into (a multiple of 16: their maxima are taken 16
#: floats at a time); at least as many as the running lists are long
MIN_BLOCKS = 32
_INF = float("inf")


@dataclass(frozen=True)
class MinedNegatives:
    """indices: (Q, k) long, gallery indices ranked range_min.. of each query's filtered
    order, -1 past the last found; scores: (Q, k) float32 cosine scores, nan for -1;
    counts: (Q,) long, how many were found."""

    indices: torch.Tensor
    scores: torch.Tensor
    counts: torch.Tensor


def positives_csr(positives, n_queries: int, n_gallery: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(offsets (Q+1,), indices) long on CPU: query q's positives are
    ``indices[offsets[q]:offsets[q + 1]]``. ``positives`` is such a tuple of two tensors,
    or a list with one sequence / tensor of gallery indices per query. Raises ValueError
    for a wrong length or an index outside 0..n_gallery-1 (naming query and index)."""
    if isinstance(positives, tuple) and len(positives) == 2 and all(isinstance(t, torch.Tensor) for t in positives):
        offsets, indices = (t.detach().to("cpu", torch.long).flatten() for t in positives)
        if len(offsets) != n_queries + 1 or int(offsets[0]) != 0 or int(offsets[-1]) != len(indices) \
                or bool((offsets[1:] < offsets[:-1]).any()):
            raise ValueError(f"positives: offsets must be (Q+1,) = ({n_queries + 1},), non-decreasing from 0 to "
                             f"len(indices) = {len(indices)}")
    else:
        if not isinstance(positives, Sequence) or isinstance(positives, (str, bytes)):
            raise ValueError("positives: expected (offsets, indices) tensors or a list of index lists")
        if len(positives) != n_queries:
            raise ValueError(f"positives: {len(positives)} lists for {n_queries} queries")
        rows = [torch.as_tensor(p, dtype=torch.long).flatten() for p in positives]
        indices = torch.cat(rows) if rows else torch.zeros(0, dtype=torch.long)
        offsets = torch.zeros(n_queries + 1, dtype=torch.long)
        offsets[1:] = torch.cumsum(torch.tensor([len(r) for r in rows], dtype=torch.long), 0)
    bad = ((indices < 0) | (indices >= n_gallery)).nonzero()
    if len(bad):
        at = int(bad[0])
        query = int(torch.searchsorted(offsets, torch.tensor(at), right=True)) - 1
        raise ValueError(f"positives: query {query} has gallery index {int(indices[at])}, outside 0..{n_gallery - 1}")
    return offsets, indices


def mine_hard_negatives(query_emb: torch.Tensor, gallery_emb: torch.Tensor, positives, *, k: int,
                        range_min: int = 0, range_max: int | None = None, margin: float | None = None,
                        chunk_size: int | None = None, device: torch.device | str | None = None,
                        max_chunk_bytes: int = 256 * 2**20) -> MinedNegatives:
    """For every query (Q, D) the gallery (G, D) entries that are not its ``positives``
    (and, with ``margin``, score at most the query's lowest positive score minus
    ``margin``), ordered by cosine score descending, ties by lower gallery index; the first
    ``range_min`` of that order skipped, up to ``k`` taken from ranks [range_min,
    range_max). ``chunk_size``: queries per tile; ``max_chunk_bytes``: one tile and its work
    buffer (shared among the CPU workers). See the module docstring for the exact rules."""
    if query_emb.ndim != 2 or gallery_emb.ndim != 2 or query_emb.shape[1] != gallery_emb.shape[1]:
        raise ValueError(f"embeddings must be (Q, D) and (G, D), got {tuple(query_emb.shape)} and "
                         f"{tuple(gallery_emb.shape)}")
    if k < 1 or range_min < 0:
        raise ValueError(f"k must be >= 1 and range_min >= 0, got k={k}, range_min={range_min}")
    if range_max is not None and range_max <= range_min:
        raise ValueError(f"range_max must exceed range_min, got range_min={range_min}, range_max={range_max}")
    if margin is not None and not math.isfinite(margin):
        raise ValueError(f"margin must be finite, got {margin}")
    n_queries, n_gallery = len(query_emb), len(gallery_emb)
    offsets, pos_indices = positives_csr(positives, n_queries, n_gallery)
    if margin is not None:
        empty = (offsets[1:] == offsets[:-1]).nonzero()
        if len(empty):
            raise ValueError(f"positives: query {int(empty[0])} has no positive; a margin needs one")
    device = torch.device(device) if device is not None else query_emb.device
    if device.type == "cpu":  # numba's loops for large work (as the recall engine's)
        _count_kernels.prepare(n_queries * n_gallery, saving=_tile_calibration.count_saving)
    depth = range_min + k if range_max is None else min(range_min + k, range_max)
    miner = _Miner(query_emb, gallery_emb, offsets, pos_indices, depth=depth, margin=margin,
                   chunk_size=chunk_size, device=device, max_chunk_bytes=max_chunk_bytes)
    top_scores, top_idx = miner.run()
    take = min(k, depth - range_min)
    scores = torch.full((n_queries, k), math.nan, dtype=torch.float32)
    indices = torch.full((n_queries, k), -1, dtype=torch.long)
    window_scores, window_idx = top_scores[:, range_min:range_min + take], top_idx[:, range_min:range_min + take]
    found = window_scores > -_INF
    scores[:, :take] = torch.where(found, window_scores, math.nan)
    indices[:, :take] = torch.where(found, window_idx, -1)
    return MinedNegatives(indices=indices, scores=scores, counts=found.sum(1))


class _Worker:
    """One worker's buffers: query rows (R, D), gallery rows (C, D), a tile (R, C)."""

    def __init__(self, miner: _Miner) -> None:
        rows, cols, dim, device = miner.rows, miner.cols, miner.dim, miner.device
        self.query_rows = torch.empty(rows, dim, device=device)
        self.gallery_rows = torch.empty(cols, dim, device=device)
        self.tile = torch.empty(rows, cols, device=device)


class _Miner:
    """The tile shape, the workers, both sides as unit rows, the positives, and the (Q, L)
    running lists every block writes its own rows of."""

    def __init__(self, query_emb, gallery_emb, offsets, pos_indices, *, depth, margin, chunk_size, device,
                 max_chunk_bytes) -> None:
        self.queries = UnitRows(query_emb, device, "query_emb")
        self.gallery = UnitRows(gallery_emb, device, "gallery_emb")
        self.n_queries, self.n_gallery, self.dim = len(query_emb), len(gallery_emb), query_emb.shape[1]
        self.offsets, self.pos_indices = offsets, pos_indices.to(device)
        self.depth, self.margin, self.device = depth, margin, device
        n_workers = tile_workers(tile_budget(max_chunk_bytes=max_chunk_bytes, device=device), device)
        # a worker's share of the budget, in float32 scores: the budget counts a tile and its
        # work buffer (BYTES_PER_TILE_ELEM); here a tile has none
        budget = tile_budget(max_chunk_bytes=max_chunk_bytes // n_workers, device=device,
                             threads=1 if n_workers > 1 else None) * BYTES_PER_TILE_ELEM // 4
        # square tiles: the gallery rows' normalisation and a tile's fixed costs are spread
        # over as many queries as the tile holds gallery entries
        # a tile row is cut into `blocks` blocks of columns b, b + blocks, b + 2 blocks, ...
        self.blocks = blocks = max(MIN_BLOCKS, -(-depth // 16) * 16)
        rows = min(chunk_size or max(1, math.isqrt(budget)), max(1, budget // blocks))
        rows = max(1, min(rows, -(-self.n_queries // n_workers)))  # at least one block per worker
        if chunk_size is None:  # evened out, so that the last block is not mostly padding
            rows = -(-self.n_queries // -(-self.n_queries // rows))
        most = max(blocks, (budget // rows) // blocks * blocks)
        pieces = -(-self.n_gallery // most)
        self.rows, self.cols = rows, -(-(-(-self.n_gallery // pieces)) // blocks) * blocks
        self.workers = [_Worker(self) for _ in range(max(1, min(n_workers, -(-self.n_queries // rows))))]
        self.top_scores = torch.full((self.n_queries, depth), -_INF, device=device)
        self.top_idx = torch.full((self.n_queries, depth), -1, dtype=torch.long, device=device)
        self.ranks = torch.arange(depth, device=device)
        self.list_rows = torch.arange(self.rows, device=device).repeat_interleave(depth)
        #: scores of read blocks held before they are merged into the lists (a tile's worth)
        self.pending_elems = self.rows * self.cols

    def run(self) -> tuple[torch.Tensor, torch.Tensor]:
        blocks = [torch.arange(a, min(a + self.rows, self.n_queries), device=self.device)
                  for a in range(0, self.n_queries, self.rows)]
        with exact_matmuls(), one_thread_per_worker(len(self.workers)):
            redo = []
            visit_in_parallel(blocks, lambda worker, block: redo.append(self.mine_block(worker, block)),
                              self.workers)
            redo = torch.cat([r for r in redo if r is not None] or [torch.zeros(0, dtype=torch.long)])
            # queries whose positive scores differed between two products: scored in the main tiles first
            for a in range(0, len(redo), self.rows):
                again = self.mine_block(self.workers[0], redo[a:a + self.rows].to(self.device), same_tiles=True)
                if again is not None:
                    raise RuntimeError("the matrix product gave one pair different scores in identical calls")
        return self.top_scores.cpu(), self.top_idx.cpu()

    def block_positives(self, queries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The positive pairs of ``queries``: (P,) local rows and (P,) gallery indices,
        sorted by gallery index."""
        q = queries.cpu()
        starts, ends = self.offsets[q], self.offsets[q + 1]
        counts = ends - starts
        rows = torch.repeat_interleave(torch.arange(len(q)), counts)
        at = torch.repeat_interleave(starts - (torch.cumsum(counts, 0) - counts), counts) + torch.arange(len(rows))
        rows, cols = rows.to(self.device), self.pos_indices[at.to(self.device)]
        order = torch.argsort(cols, stable=True)
        return rows[order], cols[order]

    def score(self, worker: _Worker, gallery_rows: slice | torch.Tensor) -> tuple[torch.Tensor, int]:
        """The worker's tile: its loaded queries against ``gallery_rows`` (zero rows after
        them), always of the full (R, C) shape. Returns the tile and the number of rows."""
        n = self.gallery.load(gallery_rows, worker.gallery_rows)
        # the merges allocate between products: oneDNN's in small blocks (see _cpu_blas)
        tile_product(worker.query_rows, worker.gallery_rows, worker.tile, small_temporaries=True)
        return worker.tile, n

    def positive_scores(self, worker, pos_rows, pos_cols, same_tiles: bool) -> torch.Tensor:
        """(P,) float32 score of every positive pair, in products of the tile's shape: the
        positives' gallery rows gathered into tiles, or (``same_tiles``) the main pass's
        own tiles that hold positives."""
        scores = torch.empty(len(pos_cols), device=self.device)
        if same_tiles:
            tiles = torch.unique(pos_cols // self.cols).tolist()
            for t in tiles:
                c0 = t * self.cols
                tile, _ = self.score(worker, slice(c0, min(c0 + self.cols, self.n_gallery)))
                inside = (pos_cols >= c0) & (pos_cols < c0 + self.cols)
                scores[inside] = tile[pos_rows[inside], pos_cols[inside] - c0]
            return scores
        unique, where = torch.unique(pos_cols, return_inverse=True)
        for c0 in range(0, len(unique), self.cols):
            tile, _ = self.score(worker, unique[c0:c0 + self.cols])
            inside = (where >= c0) & (where < c0 + self.cols)
            scores[inside] = tile[pos_rows[inside], where[inside] - c0]
        return scores

    def mine_block(self, worker: _Worker, queries: torch.Tensor, same_tiles: bool = False) -> torch.Tensor | None:
        """Fill the running lists of ``queries`` (at most R of them) over every gallery
        tile. Returns the queries whose positive scores differed between the two products
        (None when none did)."""
        n_rows, depth, device = len(queries), self.depth, self.device
        self.queries.load(queries, worker.query_rows)
        pos_rows, pos_cols = self.block_positives(queries)
        top_scores = torch.full((self.rows, depth), -_INF, device=device)
        top_idx = torch.full((self.rows, depth), -1, dtype=torch.long, device=device)
        # the ceiling of every row (padding rows: nothing enters), float32 rounded down
        ceiling = torch.full((self.rows,), _INF, device=device)
        ceiling[n_rows:] = -_INF
        if self.margin is not None:
            before = self.positive_scores(worker, pos_rows, pos_cols, same_tiles)
            lowest = torch.full((n_rows,), _INF, device=device).scatter_reduce_(0, pos_rows, before, "amin")
            limit = lowest.double() - self.margin
            rounded = limit.float()
            rounded = torch.where(rounded.double() > limit, torch.nextafter(rounded, torch.tensor(-_INF)), rounded)
            ceiling[:n_rows] = rounded
            seen = torch.empty_like(before)
        # the positives of each gallery tile: pos_rows/pos_cols[bounds[t]:bounds[t + 1]]
        starts = torch.arange(0, self.n_gallery + self.cols, self.cols, device=device)
        bounds = torch.searchsorted(pos_cols, starts).tolist()
        # the lists' floor: a later index enters only above a full list's last score (ties go
        # to the lower index); -inf (positives, padding) never enters; padding rows: nothing
        list_floor = torch.full((self.rows,), -torch.finfo(torch.float32).max, device=device)
        list_floor[n_rows:] = _INF
        # a lower bound of every row's depth-th best admissible score so far: the depth-th
        # largest of `best` (depth scores of their own) and `pool` (the tiles' block maxima since,
        # element-wise: each a score of its own block), refreshed at tiles 1, 2, 4, 8, ...
        best = torch.full((self.rows, depth), -_INF, device=device)
        pool = torch.full((self.rows, self.blocks), -_INF, device=device)
        bound = list_floor
        pending, held = [], 0
        # where numba's loops are loaded: the lists kept by one compiled read of each tile instead
        compiled = _count_kernels.enabled() and worker.tile.is_cpu
        for t, c0 in enumerate(range(0, self.n_gallery, self.cols)):
            tile, n = self.score(worker, slice(c0, min(c0 + self.cols, self.n_gallery)))
            # positives and the padding past the gallery's end never enter
            if bounds[t] < bounds[t + 1]:
                mine = slice(bounds[t], bounds[t + 1])
                rows, cols = pos_rows[mine], pos_cols[mine] - c0
                if self.margin is not None:
                    seen[mine] = tile[rows, cols]
                tile[rows, cols] = -_INF
            if n < self.cols:
                tile[:, n:] = -_INF
            if compiled and _count_kernels.top_lists(tile, n_rows, c0, ceiling, top_scores, top_idx):
                continue
            maxima = self.block_maxima(tile)
            admissible = maxima if self.margin is None else maxima.masked_fill(maxima > ceiling[:, None], -_INF)
            torch.maximum(pool, admissible, out=pool)
            if t & (t + 1) == 0:
                best = torch.topk(torch.cat([best, pool], 1), depth, dim=1, sorted=False).values
                pool.fill_(-_INF)
                bound = best.amin(1)
            floor = torch.maximum(bound, list_floor)
            hit_rows, hit_blocks = (maxima >= floor[:, None]).nonzero(as_tuple=True)
            if len(hit_rows):
                values = tile.view(self.rows, -1, self.blocks)[hit_rows, :, hit_blocks]  # (H, members)
                pending.append((hit_rows, hit_blocks + c0, values))
                held += values.numel()
            if held >= self.pending_elems:
                self.merge(pending, floor, ceiling, top_scores, top_idx)
                list_floor = torch.maximum(list_floor, torch.nextafter(top_scores[:, -1], floor.new_tensor(_INF)))
                pending, held = [], 0
        if pending:
            self.merge(pending, floor, ceiling, top_scores, top_idx)
        self.top_scores[queries] = top_scores[:n_rows]
        self.top_idx[queries] = top_idx[:n_rows]
        if self.margin is not None and not torch.equal(seen, before):
            return queries[torch.unique(pos_rows[seen != before])]
        return None

    def block_maxima(self, tile: torch.Tensor) -> torch.Tensor:
        """(R, blocks) the maximum of each block of a tile row (block b: columns b,
        b + blocks, ...): an element-wise maximum of contiguous runs, 16 floats at a time."""
        return tile.view(self.rows, -1, self.blocks).amax(1)

    def merge(self, pending, floor, ceiling, top_scores, top_idx) -> None:
        """The pending blocks' scores in [floor, ceiling] of every row merged into the
        running lists (score descending, then lower index). ``pending``: per tile, the
        blocks read (rows, first gallery index, (H, members) scores)."""
        rows, first, values = (torch.cat(part) for part in zip(*pending))
        mask = values >= floor[rows, None]
        if self.margin is not None:
            mask &= values <= ceiling[rows, None]
        at, member = mask.nonzero(as_tuple=True)
        rows, cols, values = rows[at], first[at] + member * self.blocks, values[at, member]
        # in (row, index) order, as the tie rule needs
        order = torch.argsort(rows * self.n_gallery + cols)
        rows, cols, values = rows[order], cols[order], values[order]
        depth = self.depth
        all_rows = torch.cat([self.list_rows, rows])
        all_values = torch.cat([top_scores.flatten(), values])
        all_idx = torch.cat([top_idx.flatten(), cols])
        # one stable sort by (row, score descending): the lists (lower indices, in order) come
        # first and the candidates in index order, so equal keys stay in index order
        order = torch.argsort(all_rows * 2**32 - _ordered_bits(all_values), stable=True)
        # row i now holds depth + its candidates, of which the first depth stay
        held = torch.bincount(rows, minlength=self.rows) + depth
        take = order[((torch.cumsum(held, 0) - held)[:, None] + self.ranks).flatten()]
        top_scores.copy_(all_values[take].view(-1, depth))
        top_idx.copy_(all_idx[take].view(-1, depth))


def _ordered_bits(values: torch.Tensor) -> torch.Tensor:
    """int64 image of float32 ``values`` (no nan) with the same order; -0.0 and 0.0 equal
    (as their comparison is)."""
    bits = (values + 0.0).view(torch.int32)  # + 0.0 turns -0.0 into 0.0
    return (bits ^ ((bits >> 31) & 0x7FFFFFFF)).long()
