"""Ranks from half-precision (fp16 / bf16) tiles, settled in float32 wherever they matter.

One pass over the tiles multiplies in ``dtype`` (summed in float32) and brackets every
query's candidates against its best positive: above ``best + eps`` a candidate is ahead
whatever the rounding, below ``best - eps`` it is behind, in between it is undecided
(``eps`` = :func:`lowp_error`, a proven bound on the rounding). A query whose band holds
anything but its best positive while its certain rank is below ``k_max`` has its band
rescored in float32 and compared under the tie rule (:func:`_resolve_band`); the other
ranks below ``k_max`` are exact already, those above are lower bounds.
"""

from __future__ import annotations

import torch

from vlr_plugins.eval._cpu_blas import tile_product
from vlr_plugins.eval._tiles import ScoreMatrix, count_above, count_accumulators, exact_matmuls
from vlr_plugins.eval.exact_ranks import best_positives, positive_scores
from vlr_plugins.eval.row_ranks import gallery_scores, pair_scores, positive_pairs, query_and_gallery

_UNIT_ROUNDOFF = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
_INF = float("inf")
_BYTES_PER_BAND_ELEM = 24  # a score row, its masks and the band's indices
_BYTES_PER_PAIR_DIM = 8  # two float32 rows per rescored pair


def lowp_error(dtype: torch.dtype, dim: int) -> float:
    """Bound on |score computed in ``dtype`` - score computed in float32| for unit vectors
    of ``dim`` dimensions.

    Inputs rounded to ``dtype`` (2u), products summed in float32 (D 2^-24), output rounded
    (u); both float32 scores may be off the exact one by D 2^-24; fp16 subnormals add D 2^-24.
    """
    unit_roundoff = _UNIT_ROUNDOFF[dtype]
    subnormal = dim * 2.0**-24 if dtype == torch.float16 else 0.0
    return 3.5 * unit_roundoff + 8 * dim * 2.0**-24 + subnormal


def bracketed_ranks(matrix: ScoreMatrix, dtype: torch.dtype, k_max: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(N,) i2t and (M,) t2i ranks from products in ``dtype``: exact below ``k_max``,
    lower bounds (>= k_max) above."""
    eps = lowp_error(dtype, matrix.dim)
    with exact_matmuls():
        positive_score, _ = positive_scores(matrix)
        best_score, _ = best_positives(matrix, positive_score)
        bounds = [_bracket(best_score, eps), _bracket(positive_score, eps)]
        counts = _bracket_pass(matrix, dtype, *bounds)
        ranks = []
        for direction, (above_upper, above_lower), (upper, lower) in zip(("i2t", "t2i"), counts, bounds):
            # above_upper candidates certainly ahead; above_lower - above_upper in the band,
            # the best positive among them
            certain, in_reach = above_upper.long(), above_lower.long()
            unsure = (certain < k_max) & (in_reach - certain != 1)
            if unsure.any():
                queries = unsure.nonzero().flatten()
                certain[queries] = _resolve_band(matrix, direction, queries, upper[queries], lower[queries],
                                                 dtype)
            ranks.append(certain)
    return ranks[0], ranks[1]


def _bracket(center: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 thresholds (upper, lower) strictly outside [center - eps, center + eps]."""
    wide = center.double()
    upper = torch.nextafter((wide + eps).float(), torch.tensor(_INF, device=center.device))
    lower = torch.nextafter((wide - eps).float(), torch.tensor(-_INF, device=center.device))
    return upper, lower


def _bracket_pass(matrix: ScoreMatrix, dtype: torch.dtype, item_bounds: tuple[torch.Tensor, torch.Tensor],
                  text_bounds: tuple[torch.Tensor, torch.Tensor]) -> list[list[torch.Tensor]]:
    """One pass over the tiles in ``dtype``: [[items' counts above their (N,) upper and
    lower bounds], [texts' counts above their (M,) upper and lower bounds]]."""
    item_rows, text_rows, scores = matrix.tile_buffers(dtype)
    work = torch.empty(scores.shape, device=matrix.device)
    ones = torch.ones(max(scores.shape), device=matrix.device)
    counts = [list(pair) for pair in zip(count_accumulators(matrix.n_items, matrix.n_texts, matrix.device),
                                         count_accumulators(matrix.n_items, matrix.n_texts, matrix.device))]
    for text_start in range(0, matrix.n_texts, matrix.tile_texts):
        n_cols = matrix.texts.load(slice(text_start, text_start + matrix.tile_texts), text_rows)
        for item_start in range(0, matrix.n_items, matrix.tile_items):
            n_rows = matrix.items.load(slice(item_start, item_start + matrix.tile_items), item_rows)
            tile_product(item_rows, text_rows, scores)
            valid, valid_work = scores[:n_rows, :n_cols], work[:n_rows, :n_cols]
            for bound, count in zip(text_bounds, counts[1]):
                count_above(valid, bound[text_start:text_start + n_cols], valid_work, 0,
                            count[text_start:text_start + n_cols], ones)
            for bound, count in zip(item_bounds, counts[0]):
                count_above(valid, bound[item_start:item_start + n_rows, None], valid_work, 1,
                            count[item_start:item_start + n_rows], ones)
    return counts


def _resolve_band(matrix: ScoreMatrix, direction: str, queries: torch.Tensor, upper: torch.Tensor,
                  lower: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(Q,) exact ranks of ``queries`` (Q,): their scores in ``dtype`` above ``upper`` (Q,)
    are ahead, those in (lower, upper] are rescored in float32 and compared under the tie rule."""
    query_side, gallery = query_and_gallery(matrix, direction)
    n_gallery, device = len(gallery), matrix.device
    ranks = torch.empty(len(queries), dtype=torch.long, device=device)
    per_chunk = max(1, matrix.max_chunk_bytes // (n_gallery * _BYTES_PER_BAND_ELEM))
    pairs_per_chunk = max(1, matrix.max_chunk_bytes // (_BYTES_PER_PAIR_DIM * matrix.dim))
    for start in range(0, len(queries), per_chunk):
        chunk = queries[start:start + per_chunk]
        scores = gallery_scores(matrix, query_side, chunk, gallery, dtype)
        chunk_upper, chunk_lower = upper[start:start + per_chunk, None], lower[start:start + per_chunk, None]
        ranks[start:start + per_chunk] = (scores > chunk_upper).sum(1)
        row, col = ((scores > chunk_lower) & (scores <= chunk_upper)).nonzero(as_tuple=True)
        band_score = torch.empty(len(row), device=device)
        for p in range(0, len(row), pairs_per_chunk):
            pairs = slice(p, p + pairs_per_chunk)
            band_score[pairs] = pair_scores(matrix, query_side, chunk[row[pairs]], gallery, col[pairs])
        position, positive = positive_pairs(matrix, direction, chunk)
        is_positive = torch.zeros(scores.shape, dtype=torch.bool, device=device)
        is_positive[position, positive] = True
        is_positive = is_positive[row, col]
        best_score = torch.full((len(chunk),), -_INF, device=device).scatter_reduce_(
            0, row[is_positive], band_score[is_positive], "amax")
        if not torch.isfinite(best_score).all():
            raise RuntimeError(f"{dtype} scores strayed beyond the error bound; use precision='fp32'")
        is_best = is_positive & (band_score == best_score[row])
        best_positive = torch.full((len(chunk),), n_gallery, device=device).scatter_reduce_(
            0, row[is_best], col[is_best], "amin")
        ahead = (band_score > best_score[row]) | ((band_score == best_score[row]) & (col < best_positive[row]))
        ranks[start:start + per_chunk] += torch.bincount(row[ahead], minlength=len(chunk))
    return ranks
