"""The streaming engine behind :func:`vlr_plugins.eval.retrieval.retrieval_recall`.

The (items x texts) score matrix is visited in tiles of one fixed shape (``rows`` items x
``cols`` texts, zero-padded at the edges), every tile once, and each tile serves both
directions: every item counts the texts scoring above its best text, every text the
items scoring above its owner. Only one tile and one work buffer exist at a time.

So each query needs its positive's score before the pass: a first, small pass computes
every (owner, text) score in the owner's row tile. The tie rule (lower index ahead) is
kept by comparing with >= in tiles before the positive's and with > from it on; a query
with an exact tie inside its positive's own tile is recomputed whole.

A pair must get the same float32 bits each time it is scored. BLAS gives a pair the same
bits wherever it sits in a product of one shape, but not across shapes (a 1-row product
differs in the last bit, and so may any shape when D is large), so both passes multiply
tiles of exactly the same shape; every positive pair's score is compared between the two
passes, and a query whose check fails is recomputed whole too (`Engine.row_ranks`).
"""

from __future__ import annotations

import contextlib
import math

import torch

_CPU_TILE_ELEMS_PER_THREAD = 2**20  # each thread's share of the two tile buffers: 8 MiB
_BYTES_PER_TILE_ELEM = 8  # the score tile (<= 4 bytes) and a float32 work tile
_UNIT_ROUNDOFF = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
_INF = float("inf")


def tile_shape(n: int, m: int, *, max_chunk_bytes: int, device: torch.device,
               chunk_size: int | None = None, threads: int | None = None) -> tuple[int, int]:
    """(items, texts) per tile: a tile and its work buffer take at most ``max_chunk_bytes``;
    on CPU also at most 8 MiB per thread (``torch.get_num_threads()``), so that each thread's
    share of the element-wise passes stays in cache while their fixed costs are amortised.
    ``chunk_size`` fixes the items per tile."""
    elems = max(1, max_chunk_bytes // _BYTES_PER_TILE_ELEM)
    if torch.device(device).type == "cpu":
        elems = min(elems, _CPU_TILE_ELEMS_PER_THREAD * (threads or torch.get_num_threads()))
    if chunk_size is not None:
        rows = max(1, min(chunk_size, n, elems))
    else:  # as wide as 8 rows, then evened out so that the last tile is not mostly padding
        rows = max(1, min(math.isqrt(elems // 8), n))
        rows = -(-n // -(-n // rows))
    cols = max(1, min(m, elems // rows))
    return rows, -(-m // -(-m // cols))


def lowp_error(dtype: torch.dtype, dim: int) -> float:
    """Bound on |score computed in ``dtype`` - score computed in float32| for unit vectors.

    Inputs rounded to ``dtype`` (2u), products summed in float32 (D 2^-24), output rounded
    (u); both float32 scores may be off the exact one by D 2^-24; fp16 subnormals add D 2^-24.
    """
    u = _UNIT_ROUNDOFF[dtype]
    subnormal = dim * 2.0**-24 if dtype == torch.float16 else 0.0
    return 3.5 * u + 8 * dim * 2.0**-24 + subnormal


@contextlib.contextmanager
def exact_matmuls():
    """float32 products in float32 (no TF32), half-precision products summed in float32."""
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


def _count_above(v: torch.Tensor, t: torch.Tensor, work: torch.Tensor, dim: int,
                 acc: torch.Tensor, ones: torch.Tensor, op=torch.gt) -> None:
    """acc += number of op(v, t) (v > t) along dim: a 0/1 float mask (the fastest comparison
    output on CPU) summed by a matrix-vector product with ``ones``; exact while acc stays
    below 2^24 in float32 (2^53 in float64)."""
    op(v, t, out=work)
    mask = work if dim == 1 else work.T
    if acc.dtype == mask.dtype:
        acc.addmv_(mask, ones[:mask.shape[1]])
    else:
        acc += torch.mv(mask, ones[:mask.shape[1]])


def _counters(n: int, m: int, device) -> list[torch.Tensor]:
    """Zeroed count accumulators for n items and m texts, float32 while counts fit exactly."""
    dtype = torch.float32 if max(n, m) < 2**24 else torch.float64
    return [torch.zeros(k, dtype=dtype, device=device) for k in (n, m)]


class Embeddings:
    """One side's embeddings on the engine's device, normalised in float32 rows at a time."""

    def __init__(self, emb: torch.Tensor, device: torch.device):
        self.x = emb.to(device)
        self.norm = torch.empty(len(emb), device=device)
        for a in range(0, len(emb), 4096):
            self.norm[a:a + 4096] = torch.linalg.vector_norm(self.x[a:a + 4096].float(), dim=1)
        self.norm.clamp_min_(1e-12)  # as F.normalize

    def __len__(self) -> int:
        return len(self.x)

    def load(self, sel, out: torch.Tensor) -> int:
        """Rows ``sel`` (a slice or an index tensor) with unit norm into out[:k], zeros after."""
        rows, norm = self.x[sel].float(), self.norm[sel].unsqueeze(1)
        k = len(rows)
        if out.dtype == torch.float32:
            torch.div(rows, norm, out=out[:k])
        else:
            out[:k] = rows / norm
        out[k:].zero_()
        return k


def top_candidates(scores: torch.Tensor, k: int) -> torch.Tensor:
    """(q, k) gallery indices of each row's k best scores, best first, equal scores (also
    across the k-th place) by lower index: the same on every run and device."""
    kth = scores.topk(k, dim=1).values[:, -1:]
    r, c = (scores >= kth).nonzero(as_tuple=True)  # by row, then by index
    order = torch.argsort(-scores[r, c], stable=True)
    order = order[torch.argsort(r[order], stable=True)]
    r, c = r[order], c[order]
    place = torch.arange(len(r), device=r.device) - torch.searchsorted(r, r)
    return c[place < k].view(len(scores), k)


class Engine:
    """Ranks of every item's best text (i2t) and every text's owner (t2i), 0-based; a
    candidate with the positive's exact score is ahead when its gallery index is lower."""

    def __init__(self, item_emb, text_emb, owner, *, device, max_chunk_bytes, chunk_size=None):
        self.items, self.texts = Embeddings(item_emb, device), Embeddings(text_emb, device)
        self.n, self.m, self.dim, self.device = len(item_emb), len(text_emb), item_emb.shape[1], device
        self.budget, self.chunk_size = max_chunk_bytes, chunk_size
        self.rows, self.cols = tile_shape(self.n, self.m, max_chunk_bytes=max_chunk_bytes,
                                          device=device, chunk_size=chunk_size)
        self.owner = owner.to(device, torch.long)
        self.by_owner = torch.argsort(self.owner, stable=True)  # the texts of item i are
        self.first = torch.searchsorted(self.owner[self.by_owner],  # by_owner[first[i]:first[i+1]]
                                        torch.arange(self.n + 1, device=device))

    def _tile(self, dtype=torch.float32):
        new = lambda *shape: torch.empty(*shape, device=self.device, dtype=dtype)
        return new(self.rows, self.dim), new(self.cols, self.dim), new(self.rows, self.cols)

    def _arange(self, k: int) -> torch.Tensor:
        return torch.arange(k, device=self.device)

    def positive_scores(self):
        """s[j], text j's score with its owner, computed in the owner's row tile, and the
        number of items in that row tile with exactly that score (1 when nothing ties)."""
        X, Y, S = self._tile()
        W, ones = torch.empty_like(S), torch.ones(self.rows, device=self.device)
        s = torch.empty(self.m, device=self.device)
        level = torch.zeros(self.m, device=self.device)
        starts = torch.arange(0, self.n + self.rows, self.rows, device=self.device).clamp_max(self.n)
        edges = self.first[starts].tolist()
        for t, a in enumerate(range(0, self.n, self.rows)):
            kr = self.items.load(slice(a, a + self.rows), X)
            for lo in range(edges[t], edges[t + 1], self.cols):
                sel = self.by_owner[lo:min(lo + self.cols, edges[t + 1])]
                k = self.texts.load(sel, Y)
                torch.mm(X, Y.T, out=S)
                s[sel] = val = S[self.owner[sel] - a, self._arange(k)]
                equal = torch.zeros(k, device=self.device)
                _count_above(S[:kr, :k], val, W[:kr, :k], 0, equal, ones, op=torch.eq)
                level[sel] = equal
        return s, level

    def best_positive(self, s):
        """Each item's best text score B and the lowest index p of a text reaching it."""
        B = torch.full((self.n,), -_INF, device=self.device).scatter_reduce_(0, self.owner, s, "amax")
        best = s == B[self.owner]
        p = torch.full((self.n,), self.m, device=self.device).scatter_reduce_(
            0, self.owner[best], self._arange(self.m)[best], "amin")
        return B, p

    def exact_ranks(self):
        with exact_matmuls():
            s, level_t = self.positive_scores()
            B, p = self.best_positive(s)
            ahead_i, ahead_t, level_i, seen = self._count_pass(s, B, p)
            # recomputed whole: a score that differed between passes, or a tie with the
            # positive inside its own tile (where the tile-wise rule cannot tell before from after)
            bad_t = (seen != s) | (level_t > 1)
            bad_i = level_i > 1
            bad_i[self.owner[seen != s]] = True
            ranks = [ahead_i.long(), ahead_t.long()]
            for r, bad, direction in ((ranks[0], bad_i, "i2t"), (ranks[1], bad_t, "t2i")):
                if bad.any():
                    r[bad] = self.row_ranks(direction, bad.nonzero().flatten())
        return ranks

    def _count_pass(self, s, B, p):
        n, m, rows, cols, dev = self.n, self.m, self.rows, self.cols, self.device
        X, Y, S = self._tile()
        W, ones = torch.empty_like(S), torch.ones(max(rows, cols), device=dev)
        n_row_tiles, n_tiles = -(-n // rows), -(-n // rows) * -(-m // cols)
        # tiles before the positive's compare with >= (i.e. > the next float down), so that
        # ties there count as ahead; from the positive's tile on, with >
        down = torch.tensor(-_INF, device=dev)
        T_items = torch.nextafter(B, down)
        # every positive pair (owner[j], j) in the order tiles are visited: its offset in the
        # tile (to check its score there) and its text's offset in the text tile
        j = self._arange(m)
        pair_key = (j // cols) * n_row_tiles + self.owner // rows
        visit, pair_edges = torch.argsort(pair_key, stable=True), _edges(pair_key, n_tiles)
        pair_at = ((self.owner % rows) * cols + j % cols)[visit]
        text_at, s_visit, seen = (j % cols)[visit], s[visit], torch.empty(m, device=dev)
        # every item's best pair (i, p[i]), in the same order: scores equal to it in its tile
        i = self._arange(n)
        best_key = (p // cols) * n_row_tiles + i // rows
        best_visit, best_edges = torch.argsort(best_key, stable=True), _edges(best_key, n_tiles)
        best_row, B_visit = (i % rows)[best_visit], B[best_visit]
        level_visit = torch.zeros(n, device=dev)
        ahead_i, ahead_t = _counters(n, m, dev)
        for tc, c in enumerate(range(0, m, cols)):
            kc = self.texts.load(slice(c, c + cols), Y)
            T_texts = torch.nextafter(s[c:c + kc], down)
            for tr, a in enumerate(range(0, n, rows)):
                kr = self.items.load(slice(a, a + rows), X)
                torch.mm(X, Y.T, out=S)
                tile = tc * n_row_tiles + tr
                lo, hi = pair_edges[tile], pair_edges[tile + 1]
                if hi > lo:  # the owners in this row tile: strict from here on
                    torch.index_select(S.view(-1), 0, pair_at[lo:hi], out=seen[lo:hi])
                    T_texts.index_copy_(0, text_at[lo:hi], s_visit[lo:hi])
                lo, hi = best_edges[tile], best_edges[tile + 1]
                if hi > lo:  # best texts in this tile: strict from here on
                    _count_above(S.index_select(0, best_row[lo:hi]), B_visit[lo:hi, None],
                                 W[:hi - lo], 1, level_visit[lo:hi], ones, op=torch.eq)
                    T_items.index_copy_(0, best_visit[lo:hi], B_visit[lo:hi])
                V = S[:kr, :kc]
                _count_above(V, T_texts, W[:kr, :kc], 0, ahead_t[c:c + kc], ones)
                _count_above(V, T_items[a:a + kr, None], W[:kr, :kc], 1, ahead_i[a:a + kr], ones)
        seen_by_text, level_i = torch.empty_like(seen), torch.empty_like(level_visit)
        seen_by_text[visit], level_i[best_visit] = seen, level_visit
        return ahead_i, ahead_t, level_i, seen_by_text

    def bracketed_ranks(self, dtype: torch.dtype, k_max: int):
        """Ranks from products in ``dtype``, exact below ``k_max``, lower bounds (>= k_max) above."""
        eps = lowp_error(dtype, self.dim)
        with exact_matmuls():
            s, _ = self.positive_scores()
            B, _ = self.best_positive(s)
            bounds = [_bracket(B, eps), _bracket(s, eps)]
            counts = self._bracket_pass(dtype, *bounds)
            ranks = []
            for direction, (hi, lo), (upper, lower) in zip(("i2t", "t2i"), counts, bounds):
                # hi candidates certainly ahead; lo - hi in the band, the best positive among them
                hi, lo = hi.long(), lo.long()
                unsure = (hi < k_max) & (lo - hi != 1)
                if unsure.any():
                    q = unsure.nonzero().flatten()
                    hi[q] = self._resolve_band(direction, q, upper[q], lower[q], dtype)
                ranks.append(hi)
        return ranks

    def _bracket_pass(self, dtype, item_bounds, text_bounds):
        X, Y, S = self._tile(dtype)
        W, ones = torch.empty(S.shape, device=self.device), torch.ones(max(S.shape), device=self.device)
        counts = [list(pair) for pair in zip(_counters(self.n, self.m, self.device),
                                             _counters(self.n, self.m, self.device))]
        for c in range(0, self.m, self.cols):
            kc = self.texts.load(slice(c, c + self.cols), Y)
            for a in range(0, self.n, self.rows):
                kr = self.items.load(slice(a, a + self.rows), X)
                torch.mm(X, Y.T, out=S)
                V, Wv = S[:kr, :kc], W[:kr, :kc]
                for t, acc in zip(text_bounds, counts[1]):
                    _count_above(V, t[c:c + kc], Wv, 0, acc[c:c + kc], ones)
                for t, acc in zip(item_bounds, counts[0]):
                    _count_above(V, t[a:a + kr, None], Wv, 1, acc[a:a + kr], ones)
        return counts

    def _queries(self, direction):
        return (self.items, self.texts) if direction == "i2t" else (self.texts, self.items)

    def _positives(self, direction, q):
        """(row in q, gallery index) of every positive pair of the queries q."""
        if direction == "t2i":
            return self._arange(len(q)), self.owner[q]
        count = self.first[q + 1] - self.first[q]
        row = torch.repeat_interleave(self._arange(len(q)), count)
        start = torch.repeat_interleave(self.first[q] - (torch.cumsum(count, 0) - count), count)
        return row, self.by_owner[start + self._arange(len(row))]

    def _resolve_band(self, direction, q, upper, lower, dtype):
        """Exact ranks of queries q: scores in ``dtype`` above ``upper`` are ahead, those in
        (lower, upper] are recomputed in float32 and compared under the tie rule."""
        Q, G = self._queries(direction)
        g, out = len(G), torch.empty(len(q), dtype=torch.long, device=self.device)
        per = max(1, self.budget // (g * 24))  # scores, masks and the band's indices
        pairs = max(1, self.budget // (8 * self.dim))
        for q0 in range(0, len(q), per):
            sel = q[q0:q0 + per]
            S = self._rows(Q, sel, G, dtype)
            up, low = upper[q0:q0 + per, None], lower[q0:q0 + per, None]
            out[q0:q0 + per] = (S > up).sum(1)
            r, c = ((S > low) & (S <= up)).nonzero(as_tuple=True)
            score = torch.empty(len(r), device=self.device)
            for i in range(0, len(r), pairs):
                score[i:i + pairs] = self._dot(Q, sel[r[i:i + pairs]], G, c[i:i + pairs])
            pos_r, pos_c = self._positives(direction, sel)
            is_pos = torch.zeros(S.shape, dtype=torch.bool, device=self.device)
            is_pos[pos_r, pos_c] = True
            is_pos = is_pos[r, c]
            B = torch.full((len(sel),), -_INF, device=self.device).scatter_reduce_(
                0, r[is_pos], score[is_pos], "amax")
            if not torch.isfinite(B).all():
                raise RuntimeError(f"{dtype} scores strayed beyond the error bound; use precision='fp32'")
            best = is_pos & (score == B[r])
            p = torch.full((len(sel),), g, device=self.device).scatter_reduce_(0, r[best], c[best], "amin")
            ahead = (score > B[r]) | ((score == B[r]) & (c < p[r]))
            out[q0:q0 + per] += torch.bincount(r[ahead], minlength=len(sel))
        return out

    def _dot(self, Q, qi, G, gi):
        a, b = (torch.empty(len(qi), self.dim, device=self.device) for _ in range(2))
        Q.load(qi, a)
        G.load(gi, b)
        return (a * b).sum(1)

    def _rows(self, Q, sel, G, dtype=torch.float32):
        """(len(sel), len(G)) scores of the queries sel against the whole gallery."""
        X = torch.empty(len(sel), self.dim, device=self.device, dtype=dtype)
        Y = torch.empty(self.cols, self.dim, device=self.device, dtype=dtype)
        S = torch.empty(len(sel), len(G), device=self.device, dtype=dtype)
        Q.load(sel, X)
        for c in range(0, len(G), self.cols):
            k = G.load(slice(c, c + self.cols), Y)
            S[:, c:c + k] = X @ Y[:k].T
        return S

    def row_ranks(self, direction, q, rerank=None, rerank_k=0, rerank_batch=1):
        """Exact ranks of queries q, each scored against the whole gallery at once (and, with
        ``rerank``, after re-ordering its top ``rerank_k`` candidates by the re-ranker's scores)."""
        Q, G = self._queries(direction)
        g, out = len(G), torch.empty(len(q), dtype=torch.long, device=self.device)
        k = min(rerank_k, g)
        per = self.chunk_size or max(1, self.budget // (g * 12))  # scores and masks
        with exact_matmuls():
            for q0 in range(0, len(q), per):
                sel = q[q0:q0 + per]
                S = self._rows(Q, sel, G)
                r, c = self._positives(direction, sel)
                val = S[r, c]
                B = torch.full((len(sel),), -_INF, device=self.device).scatter_reduce_(0, r, val, "amax")
                best = val == B[r]
                p = torch.full((len(sel),), g, device=self.device).scatter_reduce_(0, r[best], c[best], "amin")
                Bc = B[:, None]
                rank = ((S > Bc) | ((S == Bc) & (self._arange(g) < p[:, None]))).sum(1)
                if rerank is not None:
                    rank = self._rerank(direction, sel, S, rank, rerank, k, rerank_batch)
                out[q0:q0 + per] = rank
        return out

    def _rerank(self, direction, sel, S, rank, rerank, k, batch):
        cand = top_candidates(S, k)
        new = torch.empty(cand.shape, device=self.device)
        for b in range(0, len(sel), batch):
            got = rerank(sel[b:b + batch], cand[b:b + batch], direction)
            got = torch.as_tensor(got).to(self.device, torch.float32)
            if got.shape != cand[b:b + batch].shape:
                raise ValueError(f"rerank({direction}) must return scores of shape "
                                 f"{tuple(cand[b:b + batch].shape)}, found {tuple(got.shape)}")
            new[b:b + batch] = got
        cand = cand.gather(1, torch.argsort(-new, dim=1, stable=True))
        if direction == "i2t":
            hit = self.owner[cand] == sel[:, None]
        else:
            hit = cand == self.owner[sel][:, None]
        return torch.where(rank < k, hit.int().argmax(1), rank)


def _edges(key: torch.Tensor, count: int) -> list[int]:
    """Where each value of ``key`` starts and ends once sorted: [0, ..., len(key)]."""
    return [0] + torch.bincount(key, minlength=count).cumsum(0).tolist()


def _bracket(b: torch.Tensor, eps: float):
    """float32 thresholds strictly outside [b - eps, b + eps]."""
    wide = b.double()
    upper = torch.nextafter((wide + eps).float(), torch.tensor(_INF, device=b.device))
    lower = torch.nextafter((wide - eps).float(), torch.tensor(-_INF, device=b.device))
    return upper, lower
