"""The rank of every positive pair of the image-to-text direction, for the metrics graded
over every positive (mAP@k, nDCG@k: :mod:`~vlr_plugins.eval.graded_metrics`).

Text ``j`` of item ``i`` is ranked in item ``i``'s row among all texts, the item's other
texts included, with the engine's tie rule (a text with the same score is ahead only at a
lower index). Text-to-image needs nothing more: a text has one positive, its owner, and
its pair rank is its rank.

Two ways, both exact and bounded in memory:

- :class:`PairCounts`, inside the grouped pass (:func:`~vlr_plugins.eval.grouped_ranks.grouped_ranks`):
  every tile also counts, for each of its items' positives, the texts scoring above it:
  one more comparison per score and per positive slot (the most texts an item of the tile
  has), ``(1 + workers) x slots x 4`` bytes per item of bookkeeping. The thresholds come
  from the diagonal tiles, so the tie rule holds as it does for the best positive
  (``>`` after the item's texts, ``>=`` before them); an exact tie inside the diagonal
  tile sends the item to the row-wise way.
- :class:`PairSlots`, inside the pass of :func:`~vlr_plugins.eval.exact_ranks.exact_ranks`
  (texts in any other order): the same count per score and per slot, the slots of an item
  being its texts in index order. Tiles are visited in text order, so each slot compares
  with ``>=`` in the columns of tiles before its text's and with ``>`` from it on (exactly
  the tie rule: only a text in the positive's own tile can be a tie at a lower index); an
  exact tie inside the positive's own tile (its row there compared with its score: one
  tile row per positive pair) sends the item to the row-wise way, as does an item with
  too many texts to count in every tile (more than :func:`slot_cap`).
- :func:`row_pair_ranks`: queries against the whole gallery, a chunk at a time, for those
  items and for re-ranking (a positive among the re-ranked candidates takes its place in
  their new order; one outside keeps its first-stage rank, which is at least ``rerank_k``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise

import torch

from vlr_plugins.eval._tiles import ScoreMatrix, count_above, count_accumulators, exact_matmuls
from vlr_plugins.eval.row_ranks import (
    TileKeys,
    ahead_in_rows,
    direct_rows_per_chunk,
    gallery_scores,
    is_positive,
    positive_pairs,
    reranked_candidates,
    rows_per_chunk,
)

__all__ = ["PairCounts", "PairSlots", "least_per_item", "row_pair_ranks", "slot_cap"]

_INF = float("inf")
#: an item may have this many texts, or twice the mean, and still be counted in the tiles
#: (:class:`PairSlots`); one with more is ranked row-wise
MIN_SLOT_CAP = 8


class PairCounts:
    """Texts ahead of every positive pair, counted tile by tile in the grouped pass.

    ``threshold[s, i]`` is item i's ``s``-th text's score (+inf past its last text, which no
    score exceeds); ``down`` the next float below (``>=`` as ``>``). The diagonal tile of a
    block sets its items' thresholds, counts there with ``>`` and marks an item whose
    positive ties another text of that tile; other tiles add to a worker's own counts.
    """

    def __init__(self, matrix: ScoreMatrix, bounds: Sequence[int], keys: TileKeys | None = None) -> None:
        self.matrix, self.keys = matrix, keys
        per_item = matrix.first_text[1:] - matrix.first_text[:-1]
        self.slots = int(per_item.max())
        # texts are grouped by item here: text j is slot j - first_text[owner[j]] of its owner
        self.slot = matrix.arange(matrix.n_texts) - matrix.first_text[matrix.owner]
        self.block_slots = [int(per_item[a:b].max()) for a, b in pairwise(bounds)]
        shape = (self.slots, matrix.n_items)
        self.threshold = torch.full(shape, _INF, device=matrix.device)
        self.down = torch.full(shape, _INF, device=matrix.device)
        dtype = count_accumulators(matrix.n_items, matrix.n_texts, matrix.device)[0].dtype
        self.counts = torch.zeros(shape, dtype=dtype, device=matrix.device)
        self.redo = torch.zeros(matrix.n_items, dtype=torch.bool, device=matrix.device)

    def worker_counts(self) -> torch.Tensor:
        """A worker's own zeroed counts, added to by the tiles off the diagonal."""
        return torch.zeros_like(self.counts)

    def diagonal(self, block: int, items: tuple[int, int], texts: tuple[int, int], positive: torch.Tensor,
                 scores: torch.Tensor, work: torch.Tensor, ones: torch.Tensor) -> None:
        """Block ``block``'s diagonal tile ``scores`` (its items x texts) with its texts'
        ``positive`` scores: thresholds, ties and counts of its items (only theirs); an item
        with a positive whose score (a re-normalisation's key) is not finite is ranked row-wise."""
        (a0, a1), (t0, t1) = items, texts
        if self.keys is not None:
            not_finite = ~self.keys.safe(positive)
            if bool(not_finite.any()):
                self.redo[self.matrix.owner[t0:t1][not_finite]] = True
        threshold = self.threshold[:, a0:a1]
        threshold[self.slot[t0:t1], self.matrix.owner[t0:t1] - a0] = positive
        torch.nextafter(threshold, torch.tensor(-_INF, device=threshold.device), out=self.down[:, a0:a1])
        ties = torch.zeros(a1 - a0, device=scores.device)
        for s in range(self.block_slots[block]):
            ties.zero_()
            count_above(scores, threshold[s, :, None], work, 1, ties, ones, compare=torch.eq)
            self.redo[a0:a1] |= ties > 1
            count_above(scores, threshold[s, :, None], work, 1, self.counts[s, a0:a1], ones)

    def off_diagonal(self, counts: torch.Tensor, item_block: int, text_block: int, items: tuple[int, int],
                     scores: torch.Tensor, work: torch.Tensor, ones: torch.Tensor) -> None:
        """Tile (item_block, text_block) off the diagonal into a worker's ``counts``: its texts
        come after the items' own when item_block < text_block (strict), else before (>=)."""
        a0, a1 = items
        threshold = self.threshold if item_block < text_block else self.down
        for s in range(self.block_slots[item_block]):
            count_above(scores, threshold[s, a0:a1, None], work, 1, counts[s, a0:a1], ones)

    def ranks(self, worker_counts: Sequence[torch.Tensor]) -> torch.Tensor:
        """(M,) every text's rank in its owner's row, once every tile is counted; the items
        marked on the diagonal are ranked row-wise."""
        total = self.counts.clone()
        for counts in worker_counts:
            total += counts
        out = total[self.slot, self.matrix.owner].long()
        if bool(self.redo.any()):
            with exact_matmuls():
                row_pair_ranks(self.matrix, self.redo.nonzero().flatten(), out, keys=self.keys)
        return out


def slot_cap(n_items: int, n_texts: int) -> int:
    """The most texts an item may have to be counted by :class:`PairSlots`: every tile of its
    row tile compares each score once per slot, and the bookkeeping is per slot and item, so
    an item far above the mean is ranked row-wise instead (:data:`MIN_SLOT_CAP` or twice the
    mean number of texts per item, whichever is more)."""
    return max(MIN_SLOT_CAP, 2 * -(-n_texts // max(1, n_items)))


class PairSlots:
    """Texts ahead of every positive pair, counted tile by tile in the pass of
    :func:`~vlr_plugins.eval.exact_ranks.exact_ranks`, whatever the order of the texts.

    Item i's texts in index order are its slots 0, 1, ...: ``threshold[s, i]`` is its
    ``s``-th text's positive score (from the first pass; +inf past its last text, which no
    score exceeds), ``down`` the next float below (``>=`` as ``>``), ``col[s, i]`` the column
    of tiles holding that text (0 past the last). A column of tiles ``c`` compares slot s of
    item i with ``>`` when ``col[s, i] <= c``, else with ``>=`` (:meth:`thresholds`): every
    text of an earlier column has a lower index, every text of a later one a higher. In the
    positive's own tile the comparison is ``>``, so a text there with exactly the positive's
    score (before or after it) marks the item (:meth:`own_tile_ties`), and the marked items,
    with those holding more than :func:`slot_cap` texts, are ranked row-wise
    (:meth:`ranks`). Bookkeeping: ``(4 + 2 workers) x slots x 4`` bytes per item (8 where
    counts need float64) and 8 per text.
    """

    def __init__(self, matrix: ScoreMatrix, positive_score: torch.Tensor) -> None:
        self.matrix = matrix
        owner, device = matrix.owner, matrix.device
        per_item = matrix.first_text[1:] - matrix.first_text[:-1]
        self.row_wise = per_item > slot_cap(matrix.n_items, matrix.n_texts)
        per_item = per_item.masked_fill(self.row_wise, 0)
        # text texts_by_owner[k] is slot k - first_text[its owner] of its owner
        by_owner = matrix.texts_by_owner
        self.slot = torch.empty(matrix.n_texts, dtype=torch.long, device=device)
        self.slot[by_owner] = matrix.arange(matrix.n_texts) - matrix.first_text[owner[by_owner]]
        self.slots = int(per_item.max()) if matrix.n_items else 0
        # the slots each row tile's items use: its tiles compare that many times per score
        tile_items = matrix.tile_items
        padded = torch.zeros(-(-matrix.n_items // tile_items) * tile_items, dtype=per_item.dtype, device=device)
        padded[:matrix.n_items] = per_item
        self.row_tile_slots = padded.view(-1, tile_items).amax(1).tolist()
        counted = ~self.row_wise[owner]
        slot, item = self.slot[counted], owner[counted]
        shape = (self.slots, matrix.n_items)
        self.threshold = torch.full(shape, _INF, device=device)
        self.threshold[slot, item] = positive_score[counted]
        self.down = torch.nextafter(self.threshold, torch.tensor(-_INF, device=device))
        self.col = torch.zeros(shape, dtype=torch.int32, device=device)
        self.col[slot, item] = (matrix.arange(matrix.n_texts)[counted] // matrix.tile_texts).int()
        self.dtype = count_accumulators(matrix.n_items, matrix.n_texts, device)[0].dtype

    def worker_buffers(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A worker's own (slots, N) thresholds of the column it visits and its zeroed counts."""
        return (torch.empty_like(self.threshold),
                torch.zeros(self.threshold.shape, dtype=self.dtype, device=self.matrix.device))

    def thresholds(self, col_tile: int, items: slice, out: torch.Tensor) -> None:
        """``out[:, items]``: the thresholds of column of tiles ``col_tile`` for ``items``
        (``>`` from a slot's own column on, ``>=`` before it)."""
        torch.where(self.col[:, items] <= col_tile, self.threshold[:, items], self.down[:, items],
                    out=out[:, items])

    def count(self, row_tile: int, scores: torch.Tensor, item_start: int, thresholds: torch.Tensor,
              counts: torch.Tensor, work: torch.Tensor, ones: torch.Tensor) -> None:
        """Adds tile ``scores`` (its valid rows x columns; items from ``item_start``) to ``counts``."""
        k = self.row_tile_slots[row_tile]
        rows = slice(item_start, item_start + scores.shape[0])
        # one view per slot from one call each (the per-op cost is a fair part of a small tile's);
        # count_above's comparison and sum, written out for the float32 counts
        thresholds_k, counts_k = thresholds[:k, rows, None].unbind(0), counts[:k, rows].unbind(0)
        if self.dtype != work.dtype:
            for threshold, count in zip(thresholds_k, counts_k):
                count_above(scores, threshold, work, 1, count, ones)
            return
        ones = ones[:scores.shape[1]]
        for threshold, count in zip(thresholds_k, counts_k):
            torch.gt(scores, threshold, out=work)
            count.addmv_(work, ones)

    @staticmethod
    def own_tile_ties(scores: torch.Tensor, n_cols: int, rows: torch.Tensor, positive: torch.Tensor,
                      ties: torch.Tensor, work: torch.Tensor, ones: torch.Tensor) -> None:
        """``ties`` (P,) += the texts of the tile ``scores`` (its first ``n_cols`` columns valid)
        scoring exactly ``positive`` (P,) in row ``rows`` (P,): the positive pairs of the tile;
        1 where only the positive itself does. ``work``: the tile's work buffer."""
        per = work.shape[0]
        for a in range(0, len(rows), per):
            b = min(a + per, len(rows))
            picked = work[:b - a]  # compared in place: no buffer beyond the tile's two
            torch.index_select(scores, 0, rows[a:b], out=picked)
            valid = picked[:, :n_cols]
            count_above(valid, positive[a:b, None], valid, 1, ties[a:b], ones, compare=torch.eq)

    def ranks(self, worker_counts: Sequence[torch.Tensor], redo: torch.Tensor) -> torch.Tensor:
        """(M,) every text's rank in its owner's row once every tile is counted; the items
        ``redo`` (N,) marks (a tie in a positive's own tile, a positive scored differently by
        the two passes) and those with too many texts are ranked row-wise."""
        total = torch.zeros(self.threshold.shape, dtype=self.dtype, device=self.matrix.device)
        for counts in worker_counts:
            total += counts
        out = torch.zeros(self.matrix.n_texts, dtype=torch.long, device=self.matrix.device)
        redo = redo | self.row_wise
        counted = ~redo[self.matrix.owner]
        out[counted] = total[self.slot[counted], self.matrix.owner[counted]].long()
        if bool(redo.any()):
            with exact_matmuls():
                row_pair_ranks(self.matrix, redo.nonzero().flatten(), out)
        return out


def least_per_item(pair_ranks: torch.Tensor, owner: torch.Tensor, n_items: int) -> torch.Tensor:
    """(N,) the least of each item's texts' ranks ``pair_ranks`` (M,): its best text's rank (a
    text scoring as the best at a higher index ranks after it)."""
    least = torch.full((n_items,), pair_ranks.numel(), dtype=torch.long, device=pair_ranks.device)
    return least.scatter_reduce_(0, owner, pair_ranks, "amin")


def row_pair_ranks(matrix: ScoreMatrix, items: torch.Tensor, out: torch.Tensor,
                   rerank: Callable[[torch.Tensor, torch.Tensor, str], torch.Tensor] | None = None,
                   rerank_k: int = 0, rerank_batch: int = 1, keys: TileKeys | None = None) -> torch.Tensor:
    """``out[j]`` (``out``: (M,) long) for every text j of ``items`` (Q,): its 0-based rank in
    its owner's row, each item scored against all texts in float32
    (:func:`~vlr_plugins.eval.row_ranks.rows_per_chunk` items at a time); with ``rerank``,
    after its top ``rerank_k`` are re-ordered as :func:`~vlr_plugins.eval.row_ranks.row_ranks`
    does; with ``keys``, by a re-normalisation's keys (an item with a positive whose key is not
    finite: by its float64 transformed scores). Returns ``out``."""
    n_texts = matrix.n_texts
    per_chunk = rows_per_chunk(matrix, n_texts, keys, rerank is not None)
    with exact_matmuls():
        for start in range(0, len(items), per_chunk):
            chunk = items[start:start + per_chunk]
            raw = gallery_scores(matrix, matrix.items, chunk, matrix.texts)
            scores = raw if keys is None else keys.rows("i2t", raw, chunk)
            not_finite = _rank_pairs(matrix, chunk, scores, out, torch.isfinite if keys is None else keys.safe)
            if keys is not None and bool(not_finite.any()):
                del scores  # the keys: their bytes hold the float64 rows
                for part in not_finite.nonzero().flatten().split(direct_rows_per_chunk(per_chunk, keys)):
                    direct = keys.direct_rows("i2t", raw[part], chunk[part])
                    _rank_pairs(matrix, chunk[part], direct, out)
                    del direct
            if rerank is not None:
                k = min(rerank_k, n_texts)
                candidates = reranked_candidates(matrix, "i2t", chunk, scores, rerank, k, rerank_batch)
                row, place = is_positive(matrix, "i2t", chunk, candidates).nonzero(as_tuple=True)
                out[candidates[row, place]] = place
    return out


def _rank_pairs(matrix: ScoreMatrix, items: torch.Tensor, scores: torch.Tensor, out: torch.Tensor,
                safe: Callable[[torch.Tensor], torch.Tensor] = torch.isfinite) -> torch.Tensor:
    """``out[j]`` for every text j of ``items`` (Q,): its rank by ``scores`` (Q, M) in its owner's
    row (lower index ahead on ties). Returns (Q,) whether an item has a positive whose score is
    not ``safe`` as a threshold."""
    index = matrix.arange(matrix.n_texts)
    position, text = positive_pairs(matrix, "i2t", items)  # grouped by position
    slot = matrix.arange(len(position)) - torch.searchsorted(position, position)
    not_finite = torch.zeros(len(items), dtype=torch.bool, device=matrix.device)
    not_finite[position[~safe(scores[position, text])]] = True
    for s in range(int(slot.max()) + 1):  # each query's s-th text at once, +inf for the others
        pick = (slot == s).nonzero().flatten()
        threshold = torch.full((len(items), 1), _INF, device=matrix.device, dtype=scores.dtype)
        own = torch.full((len(items), 1), -1, device=matrix.device, dtype=torch.long)
        threshold[position[pick], 0] = scores[position[pick], text[pick]]
        own[position[pick], 0] = text[pick]
        out[text[pick]] = ahead_in_rows(scores, threshold, own, index)[position[pick]]
    return not_finite
