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
computed twice: the work is the bare multiply plus two comparisons per score. A query
with an exact tie inside its diagonal tile is recomputed whole
(:func:`~vlr_plugins.eval.row_ranks.row_ranks`), as in
:func:`~vlr_plugins.eval.exact_ranks.exact_ranks`, which handles any other text order.
"""

from __future__ import annotations

import bisect
import math
from itertools import pairwise

import torch

from vlr_plugins.eval._tile_workers import PARTS_PER_WORKER, one_thread_per_worker, split_range, visit_in_parallel
from vlr_plugins.eval._tiles import (
    ScoreMatrix,
    count_above,
    count_accumulators,
    exact_matmuls,
    tile_budget,
)
from vlr_plugins.eval.pair_ranks import PairCounts
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
    ``workers``, which visit its tiles at once; a budget counts two tile buffers (the tile and
    its work buffer), so with ``buffers`` per worker a tile holds 2 / buffers of it."""
    budget = tile_budget(max_chunk_bytes=matrix.max_chunk_bytes, device=matrix.device)
    return matrix.workers, max(1, budget * 2 // buffers // matrix.workers)


class _Worker:
    """One worker's tile buffers (a tile of at most ``rows`` items x ``cols`` aligned
    texts and its work buffer, their rows of embeddings) and its own texts-ahead counts
    of every item, which tiles of several text blocks add to."""

    def __init__(self, matrix: ScoreMatrix, rows: int, cols: int, ones: torch.Tensor,
                 ahead_of_items: torch.Tensor, ahead_of_texts: torch.Tensor,
                 pairs: PairCounts | None = None, buffers: int = 2) -> None:
        device = matrix.device
        self.matrix, self.ones = matrix, ones
        self.item_rows = torch.empty(rows, matrix.dim, device=device)
        self.text_rows = torch.empty(cols, matrix.dim, device=device)
        self.buffers = torch.empty(buffers, rows * cols, device=device)
        self.ahead_of_items = torch.zeros_like(ahead_of_items)
        self.ahead_of_texts = torch.zeros_like(ahead_of_texts)
        self.pair_counts = pairs.worker_counts() if pairs is not None else None
        self.loaded = -1  # the text block in text_rows

    def load_texts(self, block: int, t0: int, t1: int) -> None:
        """Text block ``block`` (texts t0..t1 - 1) into the text rows, zero rows up to the
        aligned width; nothing to do when it is there already."""
        if self.loaded != block:
            self.matrix.texts.load(slice(t0, t1), self.text_rows[:_aligned_up(t1 - t0)])
            self.loaded = block

    def score(self, item_block: tuple[int, int], text_block: tuple[int, int]) -> tuple[torch.Tensor, ...]:
        """The tile's scores against the loaded texts, its work buffer and its spare buffer
        (the keys of a re-normalisation; None without), (items, texts) views of (items,
        aligned) blocks."""
        (a0, a1), (t0, t1) = item_block, text_block
        self.matrix.items.load(slice(a0, a1), self.item_rows[:a1 - a0])
        shape = (a1 - a0, _aligned_up(t1 - t0))
        scores, work, *spare = (b[:shape[0] * shape[1]].view(shape)[:, :t1 - t0] for b in self.buffers)
        torch.mm(self.item_rows[:a1 - a0], self.text_rows[:shape[1]].T, out=self.buffers[0][:shape[0] * shape[1]].view(shape))
        return scores, work, spare[0] if spare else None


def grouped_ranks(matrix: ScoreMatrix, bounds: list[int], pair_ranks: bool = False,
                  keys: TileKeys | None = None) -> tuple[torch.Tensor, ...]:
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
    a query whose threshold is not finite is ranked row-wise with the same keys."""
    device, n_items, n_texts = matrix.device, matrix.n_items, matrix.n_texts
    text_bounds = matrix.first_text[bounds].tolist()
    items = list(pairwise(bounds))
    texts = list(pairwise(text_bounds))
    rows = max(b - a for a, b in items)
    cols = _aligned_up(max(b - a for a, b in texts))
    ones = torch.ones(max(rows, cols), device=device)
    ahead_of_items, ahead_of_texts = count_accumulators(n_items, n_texts, device)
    pairs = PairCounts(matrix, bounds, keys) if pair_ranks else None
    buffers = 2 if keys is None else 3
    workers = [_Worker(matrix, rows, cols, ones, ahead_of_items, ahead_of_texts, pairs, buffers)
               for _ in range(min(worker_budget(matrix)[0], len(items)))]
    positive_score = torch.empty(n_texts, device=device)
    best_score = torch.empty(n_items, device=device)
    redo_items = torch.zeros(n_items, dtype=torch.bool, device=device)
    redo_texts = torch.zeros(n_texts, dtype=torch.bool, device=device)

    def diagonal(worker: _Worker, block: int) -> None:
        """Block ``block``'s diagonal tile: its thresholds, exact ties and counts (each
        block writes only its own items' and texts' entries)."""
        (a0, a1), (t0, t1) = items[block], texts[block]
        worker.load_texts(block, t0, t1)
        scores, work, spare = worker.score((a0, a1), (t0, t1))
        local_owner = matrix.owner[t0:t1] - a0
        t2i = scores if keys is None else keys.t2i_tile(scores, (a0, a1), (t0, t1), spare, work)
        positive = t2i[local_owner, matrix.arange(t1 - t0)]
        positive_score[t0:t1] = positive
        ties = torch.zeros(t1 - t0, device=device)
        count_above(t2i, positive, work, 0, ties, ones, compare=torch.eq)
        redo_texts[t0:t1] = (ties > 1) if keys is None else (ties > 1) | ~torch.isfinite(positive)
        count_above(t2i, positive, work, 0, ahead_of_texts[t0:t1], ones)
        i2t = scores if keys is None else keys.i2t_tile(scores, (a0, a1), (t0, t1), spare, work)
        if keys is not None:  # a NaN key (a score <= 0 under the dual softmax) is behind every finite one
            positive = i2t[local_owner, matrix.arange(t1 - t0)]
        best = torch.full((a1 - a0,), -_INF, device=device).scatter_reduce_(
            0, local_owner, positive if keys is None else _nan_behind(positive), "amax")
        best_score[a0:a1] = best
        ties = torch.zeros(a1 - a0, device=device)
        count_above(i2t, best[:, None], work, 1, ties, ones, compare=torch.eq)
        redo_items[a0:a1] = (ties > 1) if keys is None else (ties > 1) | ~torch.isfinite(best)
        count_above(i2t, best[:, None], work, 1, ahead_of_items[a0:a1], ones)
        if pairs is not None:
            pairs.diagonal(block, items[block], texts[block], positive, i2t, work, ones)

    def column_part(worker: _Worker, task: tuple[int, range]) -> None:
        """Tiles of text block ``c`` against item blocks ``rows`` (but ``c``): counts in the
        worker's own accumulators (other parts of the column run on other workers)."""
        c, rows = task
        t0, t1 = texts[c]
        worker.load_texts(c, t0, t1)
        for r in rows:
            if r == c:
                continue
            a0, a1 = items[r]
            scores, work, spare = worker.score((a0, a1), (t0, t1))
            # r < c: these items come before the texts' owners, these texts after the items' best
            text_threshold = (positive_down if r < c else positive_score)[t0:t1]
            item_threshold = (best_score if r < c else best_down)[a0:a1, None]
            t2i = scores if keys is None else keys.t2i_tile(scores, (a0, a1), (t0, t1), spare, work)
            count_above(t2i, text_threshold, work, 0, worker.ahead_of_texts[t0:t1], ones)
            i2t = scores if keys is None else keys.i2t_tile(scores, (a0, a1), (t0, t1), spare, work)
            count_above(i2t, item_threshold, work, 1, worker.ahead_of_items[a0:a1], ones)
            if pairs is not None:
                pairs.off_diagonal(worker.pair_counts, r, c, (a0, a1), i2t, work, ones)

    with exact_matmuls(), one_thread_per_worker(len(workers)):
        visit_in_parallel(range(len(items)), diagonal, workers)
        # ">= x" is "> the next float below x"
        down = torch.tensor(-_INF, device=device)
        positive_down, best_down = torch.nextafter(positive_score, down), torch.nextafter(best_score, down)
        # each column in parts of about equal work, so that the workers finish together
        parts = PARTS_PER_WORKER * len(workers) // len(texts) + 1 if len(workers) > 1 else 1
        tasks = [(c, rows) for c in range(len(texts)) for rows in split_range(len(items), parts)]
        visit_in_parallel(tasks, column_part, workers)
    for worker in workers:
        ahead_of_items += worker.ahead_of_items
        ahead_of_texts += worker.ahead_of_texts
    with exact_matmuls():
        ranks = (ahead_of_items.long(), ahead_of_texts.long())
        for rank, redo, direction in zip(ranks, (redo_items, redo_texts), ("i2t", "t2i")):
            if redo.any():
                rank[redo] = row_ranks(matrix, direction, redo.nonzero().flatten(), keys=keys)
    if pairs is not None:
        return (*ranks, pairs.ranks([worker.pair_counts for worker in workers]))
    return ranks


def _nan_behind(keys: torch.Tensor) -> torch.Tensor:
    """``keys`` with NaN as -inf (behind every other key, as no comparison puts NaN ahead)."""
    return torch.where(torch.isnan(keys), -_INF, keys)


def _aligned_up(k: int) -> int:
    """k rounded up to a multiple of :data:`TEXT_ALIGN`, when that many exist below it."""
    return -(-k // TEXT_ALIGN) * TEXT_ALIGN if k >= TEXT_ALIGN else k


def _aligned_down(k: int) -> int:
    """The most texts a tile of ``k`` columns takes once padded: k rounded down to a
    multiple of :data:`TEXT_ALIGN` (k itself below it)."""
    return k - k % TEXT_ALIGN if k >= TEXT_ALIGN else k
