"""Ranks from whole score rows: each query scored against the whole gallery at once.

This serves three cases the tiled pass cannot: a query the tiled pass could not settle
(a score that changed between passes, an exact tie inside its positive's own tile), the
candidates of a reduced-precision query near its positive (their float32 scores), and
re-ranking, which needs each query's top candidates in order.

A chunk is a few queries x the whole gallery (multiplied a gallery tile at a time), as
many queries as fit in ``max_chunk_bytes``; every score a query is ranked by, its
positives' included, comes from that one computation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from vlr_plugins.eval._cpu_blas import tile_product
from vlr_plugins.eval._tiles import ScoreMatrix, UnitRows, exact_matmuls

_INF = float("inf")
#: bytes per score of a chunk of whole rows, from every buffer it holds at once: the float32
#: scores (4) and two boolean masks of the rank comparison (2)
_BYTES_PER_ROW_ELEM = 6
#: with a re-normalisation: also its float32 keys and their float32 scratch row (the masks come
#: after the scratch is freed; 8), and 1 to spare for a gallery block's product (see :func:`gallery_scores`)
_BYTES_PER_KEY_ELEM = 9
#: per score of a query ranked by float64 transformed scores (``direct_rows``): its float32 copy,
#: the float64 scores and the float64 transformed ones (20, then those and the masks: 10)
_BYTES_PER_DIRECT_ELEM = 20
#: with re-ranking: the candidates' selection (``scores >= kth``, its indices) on top (6)
_BYTES_PER_RERANK_ELEM = 6


class TileKeys(Protocol):
    """A re-normalisation's transformed scores (:mod:`~vlr_plugins.eval.renorm_keys`): of a
    tile, per direction, and of whole rows (``rows``; ``direct_rows`` in float64 for a query
    whose positive's key is not ``safe`` as a float32 threshold). A tile's keys written apart
    from its scores (in ``spare``) are read by no later call on the tile: the grouped pass
    counts them in place."""

    def t2i_tile(self, scores: torch.Tensor, items: tuple[int, int], texts: tuple[int, int],
                 spare: torch.Tensor, work: torch.Tensor) -> torch.Tensor: ...

    def i2t_tile(self, scores: torch.Tensor, items: tuple[int, int], texts: tuple[int, int],
                 spare: torch.Tensor, work: torch.Tensor) -> torch.Tensor: ...

    def rows(self, direction: str, scores: torch.Tensor, queries: torch.Tensor) -> torch.Tensor: ...

    def direct_rows(self, direction: str, scores: torch.Tensor, queries: torch.Tensor) -> torch.Tensor: ...

    def safe(self, keys: torch.Tensor) -> torch.Tensor: ...


def rows_per_chunk(matrix: ScoreMatrix, n_gallery: int, keys: TileKeys | None, rerank: bool = False) -> int:
    """Queries per chunk of whole rows: as many as ``max_chunk_bytes`` holds (6 bytes per score,
    15 with ``keys``: every buffer a chunk holds at once, see :data:`_BYTES_PER_ROW_ELEM`), at most
    ``matrix.chunk_size``; 6 more with ``rerank``."""
    per_score = chunk_bytes_per_score(keys) + (_BYTES_PER_RERANK_ELEM if rerank else 0)
    most = max(1, matrix.max_chunk_bytes // (n_gallery * per_score))
    return min(matrix.chunk_size, most) if matrix.chunk_size else most


def chunk_bytes_per_score(keys: TileKeys | None) -> int:
    """The bytes per score a chunk of whole rows is sized by (:func:`rows_per_chunk`)."""
    return _BYTES_PER_ROW_ELEM + (_BYTES_PER_KEY_ELEM if keys is not None else 0)


def direct_rows_per_chunk(per_chunk: int, keys: TileKeys) -> int:
    """Queries of a chunk of ``per_chunk`` ranked by float64 transformed scores at a time: in what
    the chunk's budget holds once its keys are freed (all but its float32 scores)."""
    return max(1, per_chunk * (chunk_bytes_per_score(keys) - 4) // _BYTES_PER_DIRECT_ELEM)


def query_and_gallery(matrix: ScoreMatrix, direction: str) -> tuple[UnitRows, UnitRows]:
    """(queries, gallery): (items, texts) for ``"i2t"``, (texts, items) for ``"t2i"``."""
    return (matrix.items, matrix.texts) if direction == "i2t" else (matrix.texts, matrix.items)


def positive_pairs(matrix: ScoreMatrix, direction: str,
                   queries: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every positive pair of ``queries`` (Q,): (P,) positions in ``queries`` and (P,)
    gallery indices, grouped by query; for ``"i2t"`` an item's texts, for ``"t2i"`` a
    text's owner."""
    if direction == "t2i":
        return matrix.arange(len(queries)), matrix.owner[queries]
    n_texts = matrix.first_text[queries + 1] - matrix.first_text[queries]
    position = torch.repeat_interleave(matrix.arange(len(queries)), n_texts)
    start = torch.repeat_interleave(matrix.first_text[queries] - (torch.cumsum(n_texts, 0) - n_texts), n_texts)
    return position, matrix.texts_by_owner[start + matrix.arange(len(position))]


def gallery_scores(matrix: ScoreMatrix, query_side: UnitRows, queries: torch.Tensor, gallery: UnitRows,
                   dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(Q, G) scores in ``dtype`` of ``queries`` (Q,) against the whole ``gallery``."""
    query_rows = torch.empty(len(queries), matrix.dim, device=matrix.device, dtype=dtype)
    gallery_rows = torch.empty(matrix.tile_texts, matrix.dim, device=matrix.device, dtype=dtype)
    scores = torch.empty(len(queries), len(gallery), device=matrix.device, dtype=dtype)
    query_side.load(queries, query_rows)
    # a block's product is a temporary (Q, block): at most a sixth of the scores' bytes. Every
    # block is a product of one shape (the last one's rows padded with zeros, its product
    # copied): BLAS gives equal gallery rows equal bits within one shape only, and the tie
    # rule needs them equal across a query's row
    block = max(1, min(matrix.tile_texts, -(-len(gallery) // 6)))
    for start in range(0, len(gallery), block):
        k = gallery.load(slice(start, start + block), gallery_rows[:block])
        if k == block:
            tile_product(query_rows, gallery_rows[:block], scores[:, start:start + k])
        else:
            padded = torch.empty(len(queries), block, device=matrix.device, dtype=dtype)
            scores[:, start:start + k] = tile_product(query_rows, gallery_rows[:block], padded)[:, :k]
    return scores


def pair_scores(matrix: ScoreMatrix, query_side: UnitRows, queries: torch.Tensor, gallery: UnitRows,
                candidates: torch.Tensor) -> torch.Tensor:
    """(P,) float32 scores of the pairs (queries[p], candidates[p]), both (P,)."""
    query_rows, gallery_rows = (torch.empty(len(queries), matrix.dim, device=matrix.device) for _ in range(2))
    query_side.load(queries, query_rows)
    gallery.load(candidates, gallery_rows)
    return (query_rows * gallery_rows).sum(1)


def top_candidates(scores: torch.Tensor, k: int) -> torch.Tensor:
    """(Q, k) gallery indices of each row's k best ``scores`` (Q, G), best first; equal scores
    (also across the k-th place) by lower index: the same on every run and device."""
    kth = scores.topk(k, dim=1).values[:, -1:]
    row, col = (scores >= kth).nonzero(as_tuple=True)  # by row, then by index
    order = torch.argsort(-scores[row, col], stable=True)
    order = order[torch.argsort(row[order], stable=True)]
    row, col = row[order], col[order]
    place = torch.arange(len(row), device=row.device) - torch.searchsorted(row, row)
    return col[place < k].view(len(scores), k)


def row_ranks(matrix: ScoreMatrix, direction: str, queries: torch.Tensor,
              rerank: Callable[[torch.Tensor, torch.Tensor, str], torch.Tensor] | None = None,
              rerank_k: int = 0, rerank_batch: int = 1, keys: TileKeys | None = None) -> torch.Tensor:
    """(Q,) exact 0-based ranks of ``queries`` (Q,) in ``direction`` (``"i2t"``: items
    among texts, ``"t2i"``: texts among items), each scored against the whole gallery in
    float32; with ``rerank``, after re-ordering its top ``rerank_k`` candidates by the
    re-ranker's scores (see :func:`~vlr_plugins.eval.retrieval_recall`); with ``keys``, by a
    re-normalisation's keys of those scores (a query whose best positive's key is not safe:
    by its float64 transformed scores).

    Queries go :func:`rows_per_chunk` at a time. Ties with the best positive go to the lower index.
    """
    query_side, gallery = query_and_gallery(matrix, direction)
    n_gallery = len(gallery)
    ranks = torch.empty(len(queries), dtype=torch.long, device=matrix.device)
    k = min(rerank_k, n_gallery)
    per_chunk = rows_per_chunk(matrix, n_gallery, keys, rerank is not None)
    with exact_matmuls():
        for start in range(0, len(queries), per_chunk):
            chunk = queries[start:start + per_chunk]
            raw = gallery_scores(matrix, query_side, chunk, gallery)
            scores = raw if keys is None else keys.rows(direction, raw, chunk)
            rank, best_score = _best_positive_ranks(matrix, direction, chunk, scores)
            if keys is not None and not bool(keys.safe(best_score).all()):
                del scores  # the keys: their bytes hold the float64 rows
                redo = (~keys.safe(best_score)).nonzero().flatten()
                step = direct_rows_per_chunk(per_chunk, keys)
                for part in redo.split(step):
                    direct = keys.direct_rows(direction, raw[part], chunk[part])
                    rank[part] = _best_positive_ranks(matrix, direction, chunk[part], direct)[0]
                    del direct
            if rerank is not None:
                rank = _rerank(matrix, direction, chunk, scores, rank, rerank, k, rerank_batch)
            ranks[start:start + per_chunk] = rank
    return ranks


def _best_positive_ranks(matrix: ScoreMatrix, direction: str, queries: torch.Tensor,
                         scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(Q,) each query's rank by ``scores`` (Q, G), lower index ahead on ties, and (Q,) its best
    positive's score (a NaN score counts as -inf)."""
    n_gallery = scores.shape[1]
    position, positive = positive_pairs(matrix, direction, queries)
    positive_score = scores[position, positive]
    positive_score = torch.where(torch.isnan(positive_score), -_INF, positive_score)
    best_score = torch.full((len(queries),), -_INF, device=matrix.device, dtype=scores.dtype).scatter_reduce_(
        0, position, positive_score, "amax")
    is_best = positive_score == best_score[position]
    best_positive = torch.full((len(queries),), n_gallery, device=matrix.device).scatter_reduce_(
        0, position[is_best], positive[is_best], "amin")
    return ahead_in_rows(scores, best_score[:, None], best_positive[:, None], matrix.arange(n_gallery)), best_score


def ahead_in_rows(scores: torch.Tensor, threshold: torch.Tensor, own: torch.Tensor,
                  index: torch.Tensor) -> torch.Tensor:
    """(Q,) the candidates of each row of ``scores`` (Q, G) ahead of a positive scoring
    ``threshold`` (Q, 1) at gallery index ``own`` (Q, 1): those above it, and those equal to it
    at a lower ``index`` (G,); two (Q, G) masks at most at once."""
    ahead = (scores > threshold).sum(1)
    ties = scores == threshold
    ties &= index < own
    return ahead + ties.sum(1)


def _rerank(matrix: ScoreMatrix, direction: str, queries: torch.Tensor, scores: torch.Tensor,
            rank: torch.Tensor, rerank: Callable[[torch.Tensor, torch.Tensor, str], torch.Tensor],
            k: int, batch: int) -> torch.Tensor:
    """Ranks (Q,) after ``rerank`` re-orders each query's top k of ``scores`` (Q, G);
    a query whose first-stage ``rank`` (Q,) is k or more keeps it."""
    candidates = reranked_candidates(matrix, direction, queries, scores, rerank, k, batch)
    return torch.where(rank < k, is_positive(matrix, direction, queries, candidates).int().argmax(1), rank)


def reranked_candidates(matrix: ScoreMatrix, direction: str, queries: torch.Tensor, scores: torch.Tensor,
                        rerank: Callable[[torch.Tensor, torch.Tensor, str], torch.Tensor], k: int,
                        batch: int) -> torch.Tensor:
    """(Q, k) each query's top k of ``scores`` (Q, G) in the order of ``rerank``'s scores
    (equal scores keep their first-stage order), ``batch`` queries per call."""
    candidates = top_candidates(scores, k)
    new_scores = torch.empty(candidates.shape, device=matrix.device)
    for start in range(0, len(queries), batch):
        expected = candidates[start:start + batch].shape
        got = rerank(queries[start:start + batch], candidates[start:start + batch], direction)
        got = torch.as_tensor(got).to(matrix.device, torch.float32)
        if got.shape != expected:
            raise ValueError(f"rerank({direction}) must return scores of shape "
                             f"{tuple(expected)}, found {tuple(got.shape)}")
        new_scores[start:start + batch] = got
    return candidates.gather(1, torch.argsort(-new_scores, dim=1, stable=True))


def is_positive(matrix: ScoreMatrix, direction: str, queries: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """(Q, k) whether each of ``candidates`` (Q, k) is a positive of its query (``queries`` (Q,))."""
    if direction == "i2t":
        return matrix.owner[candidates] == queries[:, None]
    return candidates == matrix.owner[queries][:, None]
