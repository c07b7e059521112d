"""Exact ranks in both directions from one pass over the tiles of the score matrix.

Every tile is visited once and serves both directions: every item counts the texts
scoring above its best text, every text the items scoring above its owner. Only one tile
and one work buffer exist at a time.

So each query needs its positive's score before the pass: a first, small pass
(:func:`positive_scores`) computes every (owner, text) score in the owner's row tile. The
tie rule (lower index ahead) is kept by comparing with >= in tiles before the positive's
and with > from it on; a query with an exact tie inside its positive's own tile is
recomputed whole (:func:`~vlr_plugins.eval.row_ranks.row_ranks`).

A pair must get the same float32 bits each time it is scored. Products of one shape give a
pair the same bits wherever it sits in them (as :func:`~vlr_plugins.eval._cpu_blas.tile_product`
makes them: a one-row product is padded, for one), but products of different shapes may not,
so both passes multiply tiles of exactly the same shape;
every positive pair's score is compared between the two passes, and a query whose check
fails is recomputed whole too.

With ``pair_ranks`` the same pass also ranks every text in its owner's row (the positives
mAP@k and nDCG@k grade: :class:`~vlr_plugins.eval.pair_ranks.PairSlots`, one comparison per
score and per text of an item, the same >= / > rule per text); an item's best text is then
its best-ranked one, and the best-positive comparison is not made.
"""

from __future__ import annotations

import torch

from vlr_plugins.eval._cpu_blas import tile_product
from vlr_plugins.eval._tile_workers import column_tasks, one_thread_per_worker, visit_in_parallel
from vlr_plugins.eval._tiles import ScoreMatrix, count_above, count_accumulators, exact_matmuls
from vlr_plugins.eval.pair_ranks import PairSlots, least_per_item
from vlr_plugins.eval.row_ranks import row_ranks

_INF = float("inf")


def exact_ranks(matrix: ScoreMatrix, pair_ranks: bool = False) -> tuple[torch.Tensor, ...]:
    """(N,) 0-based rank of every item's best text and (M,) of every text's owner; a
    candidate with the positive's exact score is ahead when its gallery index is lower.
    ``pair_ranks``: also (M,) every text's rank in its owner's row, from the same pass."""
    with exact_matmuls():
        positive_score, ties_in_text_tile = positive_scores(matrix)
        slots = PairSlots(matrix, positive_score) if pair_ranks else None
        best_score, best_text = best_positives(matrix, positive_score) if slots is None else (None, None)
        ahead_of_items, ahead_of_texts, ties_in_item_tile, seen, pair_counts, pair_ties = _count_pass(
            matrix, positive_score, best_score, best_text, slots)
        # recomputed whole: a score that differed between passes, or a tie with the positive
        # inside its own tile (where the tile-wise rule cannot tell before from after)
        changed = seen != positive_score
        redo_texts = changed | (ties_in_text_tile > 1)
        t2i = ahead_of_texts.long()
        if redo_texts.any():
            t2i[redo_texts] = row_ranks(matrix, "t2i", redo_texts.nonzero().flatten())
        redo_items = torch.zeros(matrix.n_items, dtype=torch.bool, device=matrix.device)
        redo_items[matrix.owner[changed]] = True
        if slots is not None:
            redo_items[matrix.owner[pair_ties > 1]] = True
            pairs = slots.ranks(pair_counts, redo_items)
            return least_per_item(pairs, matrix.owner, matrix.n_items), t2i, pairs
        redo_items |= ties_in_item_tile > 1
        i2t = ahead_of_items.long()
        if redo_items.any():
            i2t[redo_items] = row_ranks(matrix, "i2t", redo_items.nonzero().flatten())
    return i2t, t2i


class _Worker:
    """One worker's tile buffers (item rows, text rows, scores, work buffer, ones) and its
    own counts of texts ahead of every item and per-column item thresholds, which tiles of
    several columns would otherwise share."""

    def __init__(self, matrix: ScoreMatrix, ahead_of_items: torch.Tensor | None = None,
                 ahead_of_texts: torch.Tensor | None = None, slots: PairSlots | None = None) -> None:
        self.item_rows, self.text_rows, self.scores = matrix.tile_buffers()
        self.work = torch.empty_like(self.scores)
        self.ones = torch.ones(max(matrix.tile_items, matrix.tile_texts), device=matrix.device)
        self.loaded, self.n_cols = -1, 0  # the column of tiles in text_rows, and its texts
        if ahead_of_items is not None:
            self.ahead_of_items = torch.zeros_like(ahead_of_items)
            self.ahead_of_texts = torch.zeros_like(ahead_of_texts)
            self.item_threshold = torch.empty(matrix.n_items, device=matrix.device)
        if slots is not None:  # every positive pair's threshold in the column visited, and its counts
            self.pair_threshold, self.pair_counts = slots.worker_buffers()


def _workers(matrix: ScoreMatrix, tasks: int, ahead_of_items: torch.Tensor | None = None,
             ahead_of_texts: torch.Tensor | None = None, slots: PairSlots | None = None) -> list[_Worker]:
    return [_Worker(matrix, ahead_of_items, ahead_of_texts, slots)
            for _ in range(max(1, min(matrix.workers, tasks)))]


def positive_scores(matrix: ScoreMatrix) -> tuple[torch.Tensor, torch.Tensor]:
    """(M,) text j's score with its owner, computed in the owner's row tile, and (M,) the
    number of items in that row tile with exactly that score (1 when nothing ties)."""
    device, tile_items, tile_texts = matrix.device, matrix.tile_items, matrix.tile_texts
    positive_score = torch.empty(matrix.n_texts, device=device)
    ties_in_tile = torch.zeros(matrix.n_texts, device=device)
    row_tile_starts = torch.arange(0, matrix.n_items + tile_items, tile_items,
                                   device=device).clamp_max(matrix.n_items)
    # the texts owned by row tile t are texts_by_owner[owned_from[t]:owned_from[t + 1]]
    owned_from = matrix.first_text[row_tile_starts].tolist()
    row_tiles = range(-(-matrix.n_items // tile_items))

    def row_tile(worker: _Worker, row_tile: int) -> None:  # writes only its own texts' entries
        item_start = row_tile * tile_items
        n_rows = matrix.items.load(slice(item_start, item_start + tile_items), worker.item_rows)
        scores, work = worker.scores, worker.work
        for start in range(owned_from[row_tile], owned_from[row_tile + 1], tile_texts):
            texts = matrix.texts_by_owner[start:min(start + tile_texts, owned_from[row_tile + 1])]
            n_cols = matrix.texts.load(texts, worker.text_rows)
            tile_product(worker.item_rows, worker.text_rows, scores)
            positive_score[texts] = score = scores[matrix.owner[texts] - item_start, matrix.arange(n_cols)]
            equal = torch.zeros(n_cols, device=device)
            count_above(scores[:n_rows, :n_cols], score, work[:n_rows, :n_cols], 0, equal, worker.ones,
                        compare=torch.eq)
            ties_in_tile[texts] = equal

    workers = _workers(matrix, len(row_tiles))
    with one_thread_per_worker(len(workers)):
        visit_in_parallel(row_tiles, row_tile, workers)
    return positive_score, ties_in_tile


def best_positives(matrix: ScoreMatrix, positive_score: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(N,) each item's best text score, from ``positive_score`` (M,), and (N,) the lowest
    index of a text reaching it."""
    owner, n_items, n_texts = matrix.owner, matrix.n_items, matrix.n_texts
    best_score = torch.full((n_items,), -_INF, device=matrix.device).scatter_reduce_(
        0, owner, positive_score, "amax")
    is_best = positive_score == best_score[owner]
    best_text = torch.full((n_items,), n_texts, device=matrix.device).scatter_reduce_(
        0, owner[is_best], matrix.arange(n_texts)[is_best], "amin")
    return best_score, best_text


def _count_pass(matrix: ScoreMatrix, positive_score: torch.Tensor, best_score: torch.Tensor | None,
                best_text: torch.Tensor | None, slots: PairSlots | None = None) -> tuple:
    """The pass over every tile, a column of tiles (a text tile x every row tile, in row
    order) per task. Returns (N,) texts ahead of each item's best text, (M,) items ahead
    of each text's owner, (N,) texts in the tile of each item's best text scoring exactly
    as it does, (M,) each positive pair's score as this pass saw it, and with ``slots``
    (then without the best texts: ``best_score`` and ``best_text`` None, the first and third
    zero) every worker's pair counts and (M,) the texts in each positive pair's tile scoring
    exactly as it does (the best-text ones)."""
    n_items, n_texts, device = matrix.n_items, matrix.n_texts, matrix.device
    tile_items, tile_texts = matrix.tile_items, matrix.tile_texts
    n_row_tiles = -(-n_items // tile_items)
    n_col_tiles = -(-n_texts // tile_texts)
    n_tiles = n_row_tiles * n_col_tiles
    best = slots is None  # the best texts' own comparison (with slots: the least pair rank)
    # tiles before the positive's compare with >= (i.e. > the next float down), so that
    # ties there count as ahead; from the positive's tile on, with >
    down = torch.tensor(-_INF, device=device)
    # every positive pair (owner[j], j) in the order tiles are visited: its offset in the
    # flattened tile (to read its score there), its text's offset in the text tile, its row
    text = matrix.arange(n_texts)
    pair_tile = (text // tile_texts) * n_row_tiles + matrix.owner // tile_items
    pair_order, pair_edges = torch.argsort(pair_tile, stable=True), _edges(pair_tile, n_tiles)
    pair_offset = ((matrix.owner % tile_items) * tile_texts + text % tile_texts)[pair_order]
    pair_text_offset, pair_score = (text % tile_texts)[pair_order], positive_score[pair_order]
    pair_row = (matrix.owner % tile_items)[pair_order]
    seen = torch.empty(n_texts, device=device)
    pair_ties = torch.zeros(n_texts if not best else 0, device=device)
    best_ties = torch.zeros(n_items, device=device)
    if best:
        best_down = torch.nextafter(best_score, down)
        best_col = best_text // tile_texts  # an item's threshold is strict from this column of tiles on
        # every item's best pair (i, best_text[i]), in the same order: scores equal to it in its tile
        item = matrix.arange(n_items)
        best_tile = best_col * n_row_tiles + item // tile_items
        best_order, best_edges = torch.argsort(best_tile, stable=True), _edges(best_tile, n_tiles)
        best_row, best_score_in_order = (item % tile_items)[best_order], best_score[best_order]
    ahead_of_items, ahead_of_texts = count_accumulators(n_items, n_texts, device)

    owner_row_tile = matrix.owner // tile_items

    def column_part(worker: _Worker, task: tuple[int, range]) -> None:
        """Row tiles ``row_tiles`` of one column of tiles, in row order: each tile's own
        positive pairs here (no other task touches them), its counts in the worker's own
        accumulators (other parts of the column run on other workers)."""
        col_tile, row_tiles = task
        text_start = col_tile * tile_texts
        item_rows, text_rows, scores, work, ones = (worker.item_rows, worker.text_rows, worker.scores,
                                                    worker.work, worker.ones)
        if worker.loaded != col_tile:
            worker.n_cols = matrix.texts.load(slice(text_start, text_start + tile_texts), text_rows)
            worker.loaded = col_tile
        n_cols = worker.n_cols
        # strict for texts whose owner's row tile came before this part, >= for the others
        cols = slice(text_start, text_start + n_cols)
        text_threshold = torch.where(owner_row_tile[cols] < row_tiles.start, positive_score[cols],
                                     torch.nextafter(positive_score[cols], down))
        item_threshold = worker.item_threshold
        first, last = row_tiles.start * tile_items, min(row_tiles.stop * tile_items, n_items)
        if best:
            torch.where(best_col[first:last] < col_tile, best_score[first:last], best_down[first:last],
                        out=item_threshold[first:last])
        else:
            slots.thresholds(col_tile, slice(first, last), worker.pair_threshold)
        for row_tile in row_tiles:
            item_start = row_tile * tile_items
            n_rows = matrix.items.load(slice(item_start, item_start + tile_items), item_rows)
            tile_product(item_rows, text_rows, scores)
            tile = col_tile * n_row_tiles + row_tile
            lo, hi = pair_edges[tile], pair_edges[tile + 1]
            if hi > lo:  # the owners in this row tile: strict from here on
                torch.index_select(scores.view(-1), 0, pair_offset[lo:hi], out=seen[lo:hi])
                text_threshold.index_copy_(0, pair_text_offset[lo:hi], pair_score[lo:hi])
                if not best:  # every positive pair here: the texts of this tile scoring as it does
                    slots.own_tile_ties(scores, n_cols, pair_row[lo:hi], pair_score[lo:hi], pair_ties[lo:hi],
                                        work, ones)
            if best:
                lo, hi = best_edges[tile], best_edges[tile + 1]
                if hi > lo:  # best texts in this tile: strict from here on
                    best_rows = work[:hi - lo]  # compared in place: no buffer beyond the tile's two
                    torch.index_select(scores, 0, best_row[lo:hi], out=best_rows)
                    count_above(best_rows, best_score_in_order[lo:hi, None], best_rows, 1, best_ties[lo:hi], ones,
                                compare=torch.eq)
                    item_threshold.index_copy_(0, best_order[lo:hi], best_score_in_order[lo:hi])
            valid = scores[:n_rows, :n_cols]
            count_above(valid, text_threshold, work[:n_rows, :n_cols], 0,
                        worker.ahead_of_texts[text_start:text_start + n_cols], ones)
            if best:  # the tile's last reading: its mask over its own scores (grouped_ranks' spent tiles)
                count_above(valid, item_threshold[item_start:item_start + n_rows, None], valid, 1,
                            worker.ahead_of_items[item_start:item_start + n_rows], ones)
            else:
                slots.count(row_tile, valid, item_start, worker.pair_threshold, worker.pair_counts,
                            work[:n_rows, :n_cols], ones)

    workers = _workers(matrix, n_col_tiles * n_row_tiles, ahead_of_items, ahead_of_texts, slots)
    tasks = column_tasks(n_col_tiles, n_row_tiles, len(workers))
    with one_thread_per_worker(len(workers)):
        visit_in_parallel(tasks, column_part, workers)
    for worker in workers:
        ahead_of_items += worker.ahead_of_items
        ahead_of_texts += worker.ahead_of_texts
    seen_by_text = torch.empty_like(seen)
    seen_by_text[pair_order] = seen
    ties_by_item = torch.empty_like(best_ties)
    if best:
        ties_by_item[best_order] = best_ties
        return ahead_of_items, ahead_of_texts, ties_by_item, seen_by_text, None, None
    ties_by_text = torch.empty_like(pair_ties)
    ties_by_text[pair_order] = pair_ties
    return (ahead_of_items, ahead_of_texts, ties_by_item.zero_(), seen_by_text,
            [worker.pair_counts for worker in workers], ties_by_text)


def _edges(key: torch.Tensor, count: int) -> list[int]:
    """Where each value 0..count-1 of ``key`` starts and ends once sorted: [0, ..., len(key)]."""
    return [0] + torch.bincount(key, minlength=count).cumsum(0).tolist()
