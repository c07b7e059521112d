"""Exact ranks in one pass that scores every pair once, when texts are listed grouped by item.

Every benchmark file lists an item's texts together and in item order (COCO and Flickr30K
Karpathy splits, CLIP_benchmark's loader, LAVIS' ``txt2img``): ``text_owner`` never
decreases. Then the items split into consecutive blocks and the texts into the matching
blocks (block b's texts are those its items own), and every positive pair lies in a
diagonal tile (block b's items x block b's texts). So:

1. each diagonal tile is scored and gives, from itself alone, every positive score of its
   texts and the best positive of its items, and is counted in both directions at once;
2. every other tile is scored and counted with those thresholds. In tile (r, c) with
   r < c every item comes before the owners of the texts and every text after the items'
   best texts; with r > c the reverse. So one comparison per direction and tile keeps the
   tie rule (lower index ahead): ``>=`` where the candidates come first, ``>`` after.

Each pair is scored once, so no pair can get two different float32 values and nothing is
computed twice: the work is the bare multiply plus two comparisons per score. Every tile is
multiplied at one shape, the largest block's (zero rows past a smaller block; the blocks are
evened out), so that equal embeddings in blocks of different sizes still score equally (BLAS
rounds by a product's shape: :func:`~vlr_plugins.eval._cpu_blas.tile_product`). A query
with an exact tie inside its diagonal tile is recomputed whole
(:func:`~vlr_plugins.eval.row_ranks.row_ranks`), as in
:func:`~vlr_plugins.eval.exact_ranks.exact_ranks`, which handles any other text order.
"""

from __future__ import annotations

import bisect
import math
from itertools import pairwise

import torch

from vlr_plugins.eval._count_kernels import TileCounter, raw_counter
from vlr_plugins.eval._cpu_blas import tile_product
from vlr_plugins.eval._tile_workers import column_tasks, one_thread_per_worker, visit_in_parallel
from vlr_plugins.eval._tiles import (
    ScoreMatrix,
    count_above,
    count_accumulators,
    even_split,
    exact_matmuls,
    tile_budget,
)
from vlr_plugins.eval.pair_ranks import PairCounts, row_pair_ranks
from vlr_plugins.eval.renorm_keys import SLACK, QueryBankChoice
from vlr_plugins.eval.renorm_pass import RunningTop1, merge_best, tile_positions, update_best
from vlr_plugins.eval.row_ranks import TileKeys, row_ranks

_INF = float("inf")
#: the texts of a tile are padded with zero rows to a multiple of this: MKL's float32 GEMM
#: runs ~1.5x slower when the output's row length is not (2,285 against 2,288 columns)
TEXT_ALIGN = 16


def diagonal_blocks(matrix: ScoreMatrix, buffers: int = 2) -> list[int] | None:
    """Item boundaries [0, b_1, ..., N] of the diagonal tiles (block k holds items
    b_k..b_{k+1} - 1 and their texts), or None when the texts are not grouped by item in
    item order, or when one item has more texts than a tile holds.

    A tile holds a worker's share of a :func:`~vlr_plugins.eval._tiles.tile_budget`
    (:func:`worker_budget`, with ``buffers`` tile buffers per worker); blocks take ``matrix.chunk_size`` items (default: the tile's
    area over the mean number of texts per item, square root), fewer where their texts,
    padded to a multiple of :data:`TEXT_ALIGN`, would not fit.
    """
    owner, n_items, n_texts = matrix.owner, matrix.n_items, matrix.n_texts
    if n_texts > 1 and bool((owner[1:] < owner[:-1]).any()):
        return None
    _, budget = worker_budget(matrix, buffers)
    rows = matrix.chunk_size or max(1, math.isqrt(budget * n_items // n_texts))
    rows = min(rows, n_items, budget)
    if not matrix.chunk_size:  # evened out: every tile is multiplied at the largest block's shape
        rows = even_split(n_items, rows)
    cols = _aligned_down(budget // rows)
    first_text = matrix.first_text.tolist()
    if max(b - a for a, b in pairwise(first_text)) > cols:
        return None
    bounds = [0]
    while bounds[-1] < n_items:
        start = bounds[-1]
        fitting = bisect.bisect_right(first_text, first_text[start] + cols, start, n_items + 1) - 1
        bounds.append(min(start + rows, fitting))
    return bounds


def worker_budget(matrix: ScoreMatrix, buffers: int = 2) -> tuple[int, int]:
    """(workers, scores per worker's tile): the matrix's tile budget shared among its
    ``workers``, which visit its tiles at once. ``max_chunk_bytes`` holds every worker's
    ``buffers`` tile buffers; on CPU a tile holds at most the calibrated share of its thread
    (:func:`~vlr_plugins.eval._tiles.tile_budget`) whatever the number of buffers, so that a
    re-normalisation's rank pass (three buffers) multiplies tiles of the plain engine's shape
    where memory allows (on a Zen 4 VM 1.5 % faster than tiles of 2 / 3 that size)."""
    budget = tile_budget(max_chunk_bytes=matrix.max_chunk_bytes * 2 // buffers, device=matrix.device,
                         scores=matrix.n_items * matrix.n_texts)
    return matrix.workers, max(1, budget // matrix.workers)


class _Channel:
    """One direction counted under one kind of key (``keys``: a re-normalisation's, or None for
    the raw scores): its queries' thresholds (the positive's key, the next float below it for
    ``>=``), the counts the diagonal tiles add, the queries to redo row-wise, and with
    ``pair_ranks`` (image-to-text) every positive pair's counts."""

    def __init__(self, matrix: ScoreMatrix, direction: str, keys: TileKeys | None, bounds: list[int],
                 pair_ranks: bool) -> None:
        n_queries = matrix.n_texts if direction == "t2i" else matrix.n_items
        self.direction, self.keys = direction, keys
        self.threshold = torch.empty(n_queries, device=matrix.device)
        self.down = self.threshold
        self.ahead = count_accumulators(matrix.n_items, matrix.n_texts, matrix.device)[direction == "t2i"]
        self.redo = torch.zeros(n_queries, dtype=torch.bool, device=matrix.device)
        self.pairs = PairCounts(matrix, bounds, keys) if pair_ranks and direction == "i2t" else None

    def tile(self, scores: torch.Tensor, items: tuple[int, int], texts: tuple[int, int],
             spare: torch.Tensor | None, work: torch.Tensor) -> torch.Tensor:
        """The tile's keys for this channel (``scores`` itself for the raw scores)."""
        if self.keys is None:
            return scores
        keys = self.keys.t2i_tile if self.direction == "t2i" else self.keys.i2t_tile
        return keys(scores, items, texts, spare, work)

    def unsafe(self, positive: torch.Tensor) -> torch.Tensor:
        """Which thresholds cannot serve in float32 (never, for the raw scores)."""
        return torch.zeros_like(positive, dtype=torch.bool) if self.keys is None else ~self.keys.safe(positive)


class _Worker:
    """One worker's tile buffers (a tile of at most ``rows`` items x ``cols`` aligned
    texts and its work buffer, their rows of embeddings), its own counts of every channel,
    which tiles of several text blocks add to, and its raw top-1s where a choice needs them."""

    def __init__(self, matrix: ScoreMatrix, rows: int, cols: int, ones: torch.Tensor,
                 channels: list[_Channel], top1: dict[str, bool], buffers: int = 2) -> None:
        device = matrix.device
        self.matrix, self.ones = matrix, ones
        self.item_rows = torch.empty(rows, matrix.dim, device=device)
        self.text_rows = torch.empty(cols, matrix.dim, device=device)
        storage = torch.empty(buffers, rows * cols + SLACK, device=device)  # slack: renorm_keys.uniform_
        # every tile's product, work and keys at the whole (rows, cols) shape (see score)
        self.out, self.work, *spare = (b[:rows * cols].view(rows, cols) for b in storage)
        self.spare = spare[0] if spare else None
        self.ahead = [torch.zeros_like(channel.ahead) for channel in channels]
        self.pair_counts = [channel.pairs.worker_counts() if channel.pairs is not None else None
                            for channel in channels]
        # direction -> (best raw score, its gallery index) of every query
        sizes = {"t2i": (matrix.n_texts, matrix.n_items), "i2t": (matrix.n_items, matrix.n_texts)}
        self.top1 = {d: (torch.full((sizes[d][0],), -_INF, device=device),
                         torch.full((sizes[d][0],), sizes[d][1], dtype=torch.long, device=device))
                     for d, wanted in top1.items() if wanted}
        # direction -> the off-diagonal tiles' running top-1s, and a tile's raw count of each query (RunningTop1)
        self.running = {d: RunningTop1(best, index) for d, (best, index) in self.top1.items()}
        self.reached = {d: torch.empty(max(rows, cols), device=device) for d in self.top1}
        self.counter: TileCounter | None = None  # the keys' own count of every channel of a tile, if any
        self.loaded = -1  # the text block in text_rows
        self._views: dict[tuple[int, int], tuple[torch.Tensor | None, ...]] = {}  # (items, texts) -> work, spare views
        self._channel_views: dict[tuple[str, int], list[tuple[torch.Tensor, ...] | None]] = {}
        self._prefixes: dict[tuple[str, int], torch.Tensor] = {}
        self._channels = channels

    def load_texts(self, block: int, t0: int, t1: int) -> None:
        """Text block ``block`` (texts t0..t1 - 1) into the text rows, zero rows after it;
        nothing to do when it is there already."""
        if self.loaded != block:
            self.matrix.texts.load(slice(t0, t1), self.text_rows)
            self.loaded = block

    def score(self, item_block: tuple[int, int], text_block: tuple[int, int]) -> tuple[torch.Tensor, ...]:
        """The tile's scores against the loaded texts, its work buffer and its spare buffer
        (the keys of a re-normalisation; None without), (items, texts) views of (items,
        aligned) blocks: the scores in the first buffer, or in oneDNN's result as it comes
        (:func:`~vlr_plugins.eval._cpu_blas.tile_product`'s ``new_result_ok``)."""
        (a0, a1), (t0, t1) = item_block, text_block
        key = (a1 - a0, t1 - t0)
        if key not in self._views:  # a few shapes recur: their views made once (~15 us a tile otherwise)
            self._views[key] = (self.work[:key[0], :key[1]],
                                self.spare[:key[0], :key[1]] if self.spare is not None else None)
        work, spare = self._views[key]
        # every tile is one product of the buffers' whole shape (zero rows past the blocks):
        # BLAS gives equal pairs equal bits within one shape, not across shapes, so equal
        # embeddings in tiles of blocks of other sizes still tie (the tie rule)
        self.matrix.items.load(slice(a0, a1), self.item_rows)
        scores = tile_product(self.item_rows, self.text_rows, self.out, new_result_ok=True)[:a1 - a0, :t1 - t0]
        return scores, work, spare

    def channel_views(self, direction: str, block: int, q0: int, q1: int) -> list[tuple[torch.Tensor, ...] | None]:
        """Per channel of ``direction`` (None for the others): its thresholds for ``>`` and for
        ``>=`` (the next float below) of queries q0 .. q1 - 1 (the texts of a text block, or as
        (k, 1) the items of an item block) and this worker's counts of them. Made once a block
        and kept (sliced anew, a tile's ~10 views at ~2 us each were ~3 % of QB-Norm's rank pass)."""
        key = (direction, block)
        views = self._channel_views.get(key)
        if views is None:
            def of(channel: _Channel, ahead: torch.Tensor) -> tuple[torch.Tensor, ...]:
                threshold, down = channel.threshold[q0:q1], channel.down[q0:q1]
                if direction == "i2t":
                    threshold, down = threshold[:, None], down[:, None]
                return threshold, down, ahead[q0:q1]
            views = self._channel_views[key] = [of(channel, ahead) if channel.direction == direction else None
                                                for channel, ahead in zip(self._channels, self.ahead)]
        return views

    def prefix(self, vector: str, n: int) -> torch.Tensor:
        """The first ``n`` of one of the worker's vectors: ``"ones"`` (which sum a mask's rows) or a
        direction's (``"t2i"``, ``"i2t"``) raw counts of a tile; kept, as :meth:`channel_views`."""
        view = self._prefixes.get((vector, n))
        if view is None:
            view = self._prefixes[vector, n] = (self.ones if vector == "ones" else self.reached[vector])[:n]
        return view

    def track_top1(self, scores: torch.Tensor, work: torch.Tensor, items: tuple[int, int],
                   texts: tuple[int, int], positions: torch.Tensor) -> None:
        """Each query's best raw score and index so far, with this tile's."""
        for direction, (best, index) in self.top1.items():
            dim, (q0, q1), g0 = (0, texts, items[0]) if direction == "t2i" else (1, items, texts[0])
            update_best(scores, dim, g0, best[q0:q1], index[q0:q1], work, positions)


def grouped_ranks(matrix: ScoreMatrix, bounds: list[int], pair_ranks: bool = False,
                  keys: TileKeys | QueryBankChoice | None = None) -> tuple[torch.Tensor, ...]:
    """(N,) 0-based rank of every item's best text and (M,) of every text's owner, over the
    diagonal blocks ``bounds`` (from :func:`diagonal_blocks`); ties as in
    :func:`~vlr_plugins.eval.exact_ranks.exact_ranks`. On CPU the tiles are shared among
    :func:`worker_budget`'s workers (:mod:`~vlr_plugins.eval._tile_workers`).

    ``pair_ranks``: also (M,) every text's rank in its owner's row, counted in the same pass
    (:class:`~vlr_plugins.eval.pair_ranks.PairCounts`).

    ``keys``: rank by a re-normalisation's transformed scores instead
    (:mod:`~vlr_plugins.eval.renorm_keys`; ``bounds`` from ``diagonal_blocks(matrix, buffers=3)``):
    each tile's keys are computed once per direction in a third buffer, text-to-image compared
    column-wise and image-to-text row-wise, the thresholds read from the diagonal tiles' keys;
    a query whose threshold is not ``keys.safe`` is ranked row-wise with the same keys. With a
    :class:`~vlr_plugins.eval.renorm_keys.QueryBankChoice`, a direction with a bank is counted
    under each of its alternatives (one channel each) and every query's raw top-1 is found in
    the same tiles; each query then takes its alternative's rank. Where numba's loops are
    loaded (and no ``pair_ranks``), an off-diagonal tile's channels and top-1s are counted in
    one read of the tile: by the keys' ``tile_counter``, or without keys
    :func:`~vlr_plugins.eval._count_kernels.raw_counter` (both directions at once)."""
    device = matrix.device
    text_bounds = matrix.first_text[bounds].tolist()
    items = list(pairwise(bounds))
    texts = list(pairwise(text_bounds))
    rows = max(b - a for a, b in items)
    cols = _aligned_up(max(b - a for a, b in texts))
    ones = torch.ones(max(rows, cols), device=device)
    positions = tile_positions(max(rows, cols), device)
    choice = keys if isinstance(keys, QueryBankChoice) else None
    alternatives = {d: choice.alternatives(d) if choice is not None else [keys] for d in ("t2i", "i2t")}
    channels = [_Channel(matrix, d, k, bounds, pair_ranks) for d in ("t2i", "i2t") for k in alternatives[d]]
    top1 = {d: len(alternatives[d]) > 1 for d in ("t2i", "i2t")}
    buffers = 2 if keys is None else 3
    workers = [_Worker(matrix, rows, cols, ones, channels, top1, buffers)
               for _ in range(min(worker_budget(matrix)[0], len(items)))]

    def diagonal(worker: _Worker, block: int) -> None:
        """Block ``block``'s diagonal tile: its thresholds, exact ties and counts (each
        block writes only its own items' and texts' entries)."""
        (a0, a1), (t0, t1) = items[block], texts[block]
        worker.load_texts(block, t0, t1)
        scores, work, spare = worker.score((a0, a1), (t0, t1))
        worker.track_top1(scores, work, (a0, a1), (t0, t1), positions)
        local_owner = matrix.owner[t0:t1] - a0
        for channel in channels:
            tile = channel.tile(scores, (a0, a1), (t0, t1), spare, work)
            positive = tile[local_owner, matrix.arange(t1 - t0)]
            if channel.direction == "t2i":
                threshold, q, dim = positive, slice(t0, t1), 0
            else:
                threshold = torch.full((a1 - a0,), -_INF, device=device).scatter_reduce_(
                    0, local_owner, positive, "amax")
                q, dim = slice(a0, a1), 1
            channel.threshold[q] = threshold
            compared = threshold if dim == 0 else threshold[:, None]
            ties = torch.zeros(len(threshold), device=device)
            count_above(tile, compared, work, dim, ties, ones, compare=torch.eq)
            channel.redo[q] = (ties > 1) | channel.unsafe(threshold)
            count_above(tile, compared, work, dim, channel.ahead[q], ones)
            if channel.pairs is not None:
                channel.pairs.diagonal(block, items[block], texts[block], positive, tile, work, ones)

    last = len(channels) - 1

    def column_part(worker: _Worker, task: tuple[int, range]) -> None:
        """Tiles of text block ``c`` against item blocks ``rows`` (but ``c``): counts in the
        worker's own accumulators (other parts of the column run on other workers)."""
        c, rows = task
        t0, t1 = texts[c]
        worker.load_texts(c, t0, t1)
        columns = worker.channel_views("t2i", c, t0, t1)
        for r in rows:
            if r == c:
                continue
            a0, a1 = items[r]
            scores, work, spare = worker.score((a0, a1), (t0, t1))
            if worker.counter is not None and worker.counter(scores, spare, a0, t0, r < c):
                continue
            for i, (channel, column, row, pair_counts) in enumerate(zip(
                    channels, columns, worker.channel_views("i2t", r, a0, a1), worker.pair_counts)):
                tile = channel.tile(scores, (a0, a1), (t0, t1), spare, work)
                tracked = channel.keys is None and channel.direction in worker.running  # its raw top-1s too
                # the comparison's mask over the tile itself where nothing reads it again (keys apart
                # from the scores, which no later channel reads: TileKeys; the last channel's tile),
                # written where it was just read, not to a third buffer (one Intel Xeon thread:
                # ~0.17 ns a score less, of ~0.5 for the comparison)
                spent = pair_counts is None and not tracked and (tile.data_ptr() != scores.data_ptr() or i == last)
                mask = tile if spent else work
                # r < c: these items come before the texts' owners, these texts after the items' best
                if column is not None:
                    threshold, down, counts = column
                    threshold, dim = (down if r < c else threshold), 0
                else:
                    threshold, down, counts = row
                    threshold, dim = (threshold if r < c else down), 1
                summed = worker.prefix("ones", a1 - a0 if dim == 0 else t1 - t0)
                if tracked:
                    reached = worker.prefix(channel.direction, len(counts)).zero_()
                    count_above(tile, threshold, mask, dim, reached, summed)
                    counts += reached
                    # the raw top-1s where the raw counts reached, while the tile holds the raw
                    # scores (a QueryBankChoice's keys are written apart)
                    q0, g0 = (t0, a0) if dim == 0 else (a0, t0)
                    worker.running[channel.direction].tile(scores, dim, g0, q0, reached, work, positions)
                else:
                    count_above(tile, threshold, mask, dim, counts, summed)
                if pair_counts is not None:
                    channel.pairs.off_diagonal(pair_counts, r, c, (a0, a1), tile, work, ones)
        for running in worker.running.values():
            running.flush()

    with exact_matmuls(), one_thread_per_worker(len(workers)):
        visit_in_parallel(range(len(items)), diagonal, workers)
        # ">= x" is "> the next float below x"
        for channel in channels:
            channel.down = torch.nextafter(channel.threshold, torch.tensor(-_INF, device=device))
        # every channel of a tile counted at once where numba's loops are loaded (no pair counts):
        # by the keys' own counter, or the raw scores' in both directions
        if (keys is None or hasattr(keys, "tile_counter")) and not pair_ranks:
            for worker in workers:
                sides = ([(ch.threshold, ch.down, ahead) for ch, ahead in zip(channels, worker.ahead) if ch.direction == d]
                         for d in ("t2i", "i2t"))
                worker.counter = (keys.tile_counter(*sides, worker.top1) if keys is not None
                                  else raw_counter(*sides))
        visit_in_parallel(column_tasks(len(texts), len(items), len(workers)), column_part, workers)
    ranks: dict[str, list[torch.Tensor]] = {"t2i": [], "i2t": []}
    pairs: list[torch.Tensor] = []
    for i, channel in enumerate(channels):
        for worker in workers:
            channel.ahead += worker.ahead[i]
        rank = channel.ahead.long()
        # queries the keys rank by their raw scores, from whole rows (QB-Norm's not normalised)
        raw = getattr(channel.keys, "raw_queries", {}).get(channel.direction)
        if raw is not None:
            channel.redo[raw] = False  # ranked from their rows below, by their raw scores
            rank[raw] = row_ranks(matrix, channel.direction, raw)
        if bool(channel.redo.any()):
            with exact_matmuls():
                rank[channel.redo] = row_ranks(matrix, channel.direction, channel.redo.nonzero().flatten(),
                                               keys=channel.keys)
        ranks[channel.direction].append(rank)
        if channel.pairs is not None:
            pairs.append(channel.pairs.ranks([worker.pair_counts[i] for worker in workers]))
            if raw is not None:
                row_pair_ranks(matrix, raw, pairs[-1])
    found = [ranks["i2t"][0], ranks["t2i"][0]]
    for d, at in (("i2t", 0), ("t2i", 1)):
        if len(ranks[d]) > 1:
            best, index = workers[0].top1[d]
            for other in workers[1:]:
                merge_best(best, index, *other.top1[d])
            normalised = choice.choose(d, index)
            found[at] = torch.where(normalised, ranks[d][1], ranks[d][0])
            if d == "i2t" and pairs:
                pairs = [torch.where(normalised[matrix.owner], pairs[1], pairs[0])]
    if pair_ranks:
        return (*found, pairs[0])
    return tuple(found)


def _aligned_up(k: int) -> int:
    """k rounded up to a multiple of :data:`TEXT_ALIGN`, when that many exist below it."""
    return -(-k // TEXT_ALIGN) * TEXT_ALIGN if k >= TEXT_ALIGN else k


def _aligned_down(k: int) -> int:
    """The most texts a tile of ``k`` columns takes once padded: k rounded down to a
    multiple of :data:`TEXT_ALIGN` (k itself below it)."""
    return k - k % TEXT_ALIGN if k >= TEXT_ALIGN else k
