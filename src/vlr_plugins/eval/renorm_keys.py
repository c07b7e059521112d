"""The transformed scores a query ranks its gallery by under a re-normalisation
(:mod:`~vlr_plugins.eval.renorm`), for a tile of the grouped pass and for whole rows.

A tile holds items x texts; its text-to-image keys are compared column-wise (each text
against the items), its image-to-text keys row-wise. A row holds queries x the whole gallery
(``"t2i"``: texts x items, ``"i2t"``: items x texts). Both apply the same float32 operations to
each score, in the same order.

* dual softmax: the key is the paper's transformed score itself, in float32:
  ``s * exp2(s tau / ln 2 - L)`` (L the log2-sum-exp2 of the query-side column: per item for
  text-to-image, per text for image-to-text), so ``s exp(tau s) / sum exp(tau s')``. The
  exponent is <= 0 (L is at least each of its terms), so nothing overflows; what underflows
  is below 2^-100 in magnitude. A query whose positive's key is at least 2^-100 in magnitude
  (:meth:`DualSoftmaxKeys.safe`; of either sign) is ranked in the tiles: every key an underflow
  could have rounded lies between -2^-100 and 2^-100, on the right side of its threshold. Any
  other query is ranked from float64 transformed scores instead
  (:meth:`DualSoftmaxKeys.direct_rows`: ``s exp(tau s - L)``, no underflow while tau <= 300).
  No logarithm and no mask (the earlier log-domain key needed both: ``log2`` of a score <= 0
  takes a slow path, and a masked fill costs ~4 ns per score on CPU, half of the product's own
  cost); factored where the statistics allow (always for real embeddings), one exponential per
  score serves both directions: ``p = s exp2(s tau / ln 2 - c)`` and the keys ``p 2^(c - L)``
  (:class:`DualSoftmaxKeys`), five elementwise operations per tile for both directions, not eight
  (``s tau2 - c`` is one ``addcmul``, as QB-Norm's keys).
* QB-Norm: a normalised query's key is ``s beta / ln 2 - log2 Z_g`` (``log2(exp(beta s) / Z_g)``),
  any other query's its raw score. Whether a query is normalised depends on its raw top-1
  over the whole gallery: the grouped pass counts both cases and finds the top-1s in the same
  tiles (:class:`QueryBankChoice`), the row-wise paths get them from a pass first
  (:class:`QueryBankKeys` with ``normalised``).
"""

from __future__ import annotations

import math

import torch

from vlr_plugins.eval import _count_kernels

__all__ = ["DualSoftmaxKeys", "QueryBankChoice", "QueryBankKeys", "uniform_", "with_slack"]

_LN2 = math.log(2.0)
#: the least magnitude of a positive's dual-softmax key that serves as a float32 threshold
_SAFE_KEY = 2.0 ** -100
#: the factored dual-softmax keys' constant: ``c = min L + 25`` (:func:`_shared_shift`)
_FACTOR_HEADROOM = 25.0
#: ... taken while ``max(L, tau2) - min L`` is at most this: every ``2^(c - L)`` and every
#: ``exp2(s tau2 - c)`` of a key >= 2^-100 then lies in [2^-125, 2^126]
_FACTOR_SPAN = 148.0


#: elements per call of :func:`uniform_`: a multiple of every CPU vector loop's step, at most
#: ATen's grain size (a call that long is never split among threads)
_UNIFORM_SPAN = 32768
#: what a buffer handed to :func:`uniform_` holds past its last element (``with_slack``)
SLACK = 64


def with_slack(*shape: int, dtype: torch.dtype = torch.float32, device: torch.device | None = None) -> torch.Tensor:
    """An empty tensor of ``shape`` whose storage runs :data:`SLACK` elements on, for :func:`uniform_`."""
    n = math.prod(shape)
    return torch.empty(n + SLACK, dtype=dtype, device=device)[:n].view(shape)


def uniform_(t: torch.Tensor, op: str) -> torch.Tensor:
    """``t.<op>_()`` (``"exp2"``, ``"exp"``) with every element computed by the same code.

    On CPU ATen computes a transcendental function in vectors (SLEEF) and the elements left over
    at the end of a loop (a row of a non-contiguous view, the end of a thread's share) one at a
    time (libm): the two differ in the last bit for ~6 % of inputs, so two equal scores could
    get different keys and an exact tie be broken by its column. Here the op runs over the flat
    storage from ``t``'s first to its last element (gaps between rows included), rounded up to a
    multiple of 64, in calls of :data:`_UNIFORM_SPAN` elements: only whole vectors, on one
    thread per call (one call when torch runs on one thread, as in the engine's workers). ``t``:
    rows contiguous, its storage at least :data:`SLACK` elements longer (:func:`with_slack`). Elsewhere than CPU: the op itself."""
    if t.device.type != "cpu" or t.numel() == 0:
        return getattr(t, f"{op}_")()
    t2 = t if t.dim() == 2 else t.view(1, -1)
    if t2.stride(1) != 1:
        raise ValueError("uniform_ needs rows of contiguous elements")
    span = (t2.shape[0] - 1) * t2.stride(0) + t2.shape[1]
    flat = t2.as_strided((-(-span // SLACK) * SLACK,), (1,), t2.storage_offset())
    if torch.get_num_threads() == 1:  # one thread: one call, never split (its rest is in the slack)
        getattr(flat, f"{op}_")()
        return t
    for part in flat.split(_UNIFORM_SPAN):
        getattr(part, f"{op}_")()
    return t


class _Rows:
    """Rows of one value a tile broadcasts, made once for each (width, device, dtype, value)."""

    def __init__(self) -> None:
        self._made: dict[tuple, torch.Tensor] = {}

    def __call__(self, like: torch.Tensor, value: float) -> torch.Tensor:
        """A contiguous (1, width) row of ``value``, ``like``'s width, device and dtype."""
        shape = (like.shape[-1], like.device, like.dtype, value)
        row = self._made.get(shape)
        if row is None:
            row = self._made[shape] = torch.full((1, shape[0]), value, device=like.device, dtype=like.dtype)
        return row


def _scaled_plus(scores: torch.Tensor, scale: float, offset: torch.Tensor, ones: torch.Tensor,
                 out: torch.Tensor) -> torch.Tensor:
    """out = scores * scale + offset (``offset`` broadcast; ``ones`` a (1, width) row of ones) in
    one pass, bit for bit ``torch.mul(scores, scale)`` then ``add_(offset)``: ATen's addcmul
    computes ``self + value * t1 * t2`` as ``((value * t1) * t2) + self``, so with t2 = 1 the same
    two roundings (a fused multiply-add of its last product changes nothing: that product is
    exact; tested). The ones are a contiguous row: where ``offset`` and the ones both broadcast
    without a unit stride ATen takes its scalar loop."""
    return torch.addcmul(offset, scores, ones, value=scale, out=out)


def _dsl_key(scores: torch.Tensor, tau2: float, lse: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """out = scores * exp2(scores * tau2 - lse), elementwise (``lse`` broadcast; ``out``:
    storage with :data:`SLACK`)."""
    torch.mul(scores, tau2, out=out)
    return uniform_(out.sub_(lse), "exp2").mul_(scores)


def _shared_shift(tau2: float, item_lse: torch.Tensor, text_lse: torch.Tensor) -> float | None:
    """The constant ``c`` of the factored keys (:class:`DualSoftmaxKeys`), or None where no
    ``c`` keeps every factor a normal float32: ``c = min L + 25`` serves while the statistics
    span at most :data:`_FACTOR_SPAN` and none lies more than that below ``tau2``."""
    if not (len(item_lse) and len(text_lse)):
        return None
    lo = min(float(item_lse.min()), float(text_lse.min()))
    hi = max(float(item_lse.max()), float(text_lse.max()))
    if not (math.isfinite(lo) and math.isfinite(hi)) or max(hi, tau2) - lo > _FACTOR_SPAN:
        return None
    return float(torch.tensor(lo + _FACTOR_HEADROOM, dtype=torch.float32))


class DualSoftmaxKeys:
    """Dual-softmax keys from ``item_lse`` (N,) and ``text_lse`` (M,): float32 log2-sum-exp2 of
    ``s tau / ln 2`` over each item's row and each text's column.

    Factored where the statistics allow it (:attr:`shift` not None; real embeddings: always):
    one exponential per score serves both directions, ``p = s exp2(s tau2 - c)`` with one
    constant ``c`` (:func:`_shared_shift`), and the text-to-image key is ``p 2^(c - L_item)``,
    the image-to-text one ``p 2^(c - L_text)`` (both factors float32, made once). With
    ``c = min L + 25`` and every ``L`` within :data:`_FACTOR_SPAN` of it and of ``tau2``,
    nothing overflows and every factor is a normal float; a key of magnitude >= 2^-100 has its
    exponential normal too (``s tau2 - L >= -100``, so ``s tau2 - c >= -125``), and a key whose
    exponential underflowed is below 2^-101 in magnitude, so :meth:`safe` means what it means
    for the unfactored keys (``s exp2(s tau2 - L)``, taken otherwise). In the grouped pass
    :meth:`t2i_tile` leaves ``p`` over the tile's scores and :meth:`i2t_tile` reads it there (so
    on a tile the first must come first, as :func:`~vlr_plugins.eval.grouped_ranks.grouped_ranks`
    calls them, on the same buffer); the text-to-image keys go to the spare buffer, the
    image-to-text ones over ``p``."""

    def __init__(self, temperature: float, item_lse: torch.Tensor, text_lse: torch.Tensor) -> None:
        self.temperature, self.tau2 = temperature, temperature / _LN2
        self.item_lse, self.text_lse = item_lse, text_lse
        self.shift = _shared_shift(self.tau2, item_lse, text_lse)
        if self.shift is not None:
            self.item_factor = torch.exp2(self.shift - item_lse.double()).float()
            self.text_factor = torch.exp2(self.shift - text_lse.double()).float()
        self._rows = _Rows()

    def _exponential(self, scores: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """out = exp2(scores * tau2 - c), elementwise (``out``: storage with :data:`SLACK`)."""
        minus_c = self._rows(scores, -self.shift)
        return uniform_(_scaled_plus(scores, self.tau2, minus_c, self._rows(scores, 1.0), out), "exp2")

    def t2i_tile(self, scores: torch.Tensor, items: tuple[int, int], texts: tuple[int, int],
                 spare: torch.Tensor, work: torch.Tensor) -> torch.Tensor:
        """Text-to-image keys of the tile ``scores`` (items[0]:items[1] x texts[0]:texts[1]), in
        ``spare``: factored, ``p`` left over ``scores`` for :meth:`i2t_tile` (each in place where
        it can be: a tile's writes stay in the cache lines it read); else ``scores`` kept for it.
        Nothing later reads the keys (the grouped pass may count them in place)."""
        if self.shift is None:
            return _dsl_key(scores, self.tau2, self.item_lse[items[0]:items[1], None], spare)
        scores.mul_(self._exponential(scores, spare))  # p = s exp2(s tau2 - c), over the scores
        return torch.mul(scores, self.item_factor[items[0]:items[1], None], out=spare)

    def i2t_tile(self, scores: torch.Tensor, items: tuple[int, int], texts: tuple[int, int],
                 spare: torch.Tensor, work: torch.Tensor) -> torch.Tensor:
        """Image-to-text keys of the same tile, after :meth:`t2i_tile` (given the same
        ``scores``): factored, over ``scores`` (the ``p`` there); else in ``spare`` (over the
        text-to-image ones)."""
        if self.shift is None:
            return _dsl_key(scores, self.tau2, self.text_lse[texts[0]:texts[1]], spare)
        return scores.mul_(self.text_factor[texts[0]:texts[1]])

    def tile_counter(self, cols: list[_count_kernels.Channel], rows: list[_count_kernels.Channel],
                     top1: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> _count_kernels.TileCounter | None:
        """A counter of both directions of the grouped pass's off-diagonal tiles at once, without
        writing their keys: ``cols`` = [the texts' channel] (text-to-image keys compared down the
        columns), ``rows`` = [the items'] (image-to-text, along the rows), added to as
        :meth:`t2i_tile` / :meth:`i2t_tile` and ``count_above`` would (the spare buffer
        overwritten). Where numba's loops are loaded and the keys are factored
        (:func:`~vlr_plugins.eval._count_kernels.dual_softmax_counter`: one read of a tile for
        both directions' keys and counts instead of six element-wise passes and two counting
        ones; the exponential stays torch's); None elsewhere."""
        if self.shift is None or top1:
            return None
        return _count_kernels.dual_softmax_counter(self.tau2, self.shift, (self.item_factor, self.text_factor),
                                                   *cols, *rows, lambda t: uniform_(t, "exp2"))

    def rows(self, direction: str, scores: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """(Q, G) keys of whole rows ``scores`` of ``queries`` (a new tensor)."""
        out = with_slack(*scores.shape, device=scores.device)
        if self.shift is None:
            lse = (self.item_lse if direction == "t2i" else self.text_lse)[None, :]
            return _dsl_key(scores, self.tau2, lse, out)
        factor = (self.item_factor if direction == "t2i" else self.text_factor)[None, :]
        return self._exponential(scores, out).mul_(scores).mul_(factor)

    @staticmethod
    def safe(keys: torch.Tensor) -> torch.Tensor:
        """Whether each positive's key is a float32 threshold (magnitude >= 2^-100)."""
        return keys.abs() >= _SAFE_KEY

    def direct_rows(self, direction: str, scores: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """(Q, G) float64 transformed scores ``s exp(tau s - L)`` of whole rows."""
        lse = (self.item_lse if direction == "t2i" else self.text_lse).double() * _LN2
        s = scores.double()  # then one more float64 row, computed in place
        out = torch.mul(s, self.temperature, out=with_slack(*s.shape, dtype=s.dtype, device=s.device))
        return uniform_(out.sub_(lse[None, :]), "exp").mul_(s)


class QueryBankKeys:
    """QB-Norm keys: per direction with a bank, ``log_z`` (G,) float32 log2 Z of its gallery
    and ``normalised`` (Q,) which of its queries are normalised (None: every one); ``None``
    where no bank. ``raw_queries``: direction -> the queries the grouped pass ranks as
    normalised in its tiles and then by their raw scores from whole rows (the few whose raw
    top-1 is inactive: a mask over every tile would cost more than their rows)."""

    def __init__(self, beta: float, t2i: tuple[torch.Tensor, torch.Tensor | None] | None,
                 i2t: tuple[torch.Tensor, torch.Tensor | None] | None,
                 raw_queries: dict[str, torch.Tensor] | None = None) -> None:
        self.beta2 = beta / _LN2
        self.t2i, self.i2t = t2i, i2t
        self.raw_queries = raw_queries or {}
        # -log2 Z of each direction, for the keys' one call (_normalised)
        self._minus = {d: -bank[0] for d, bank in (("t2i", t2i), ("i2t", i2t)) if bank is not None}
        self._rows = _Rows()  # the (1, width) rows of ones of the keys' one call
        self._blocks: dict[tuple[str, int, int], torch.Tensor] = {}  # a tile's -log2 Z, made once a block

    def _normalised(self, scores: torch.Tensor, minus_log_z: torch.Tensor, rows_normalised: torch.Tensor | None,
                    cols_normalised: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
        _scaled_plus(scores, self.beta2, minus_log_z, self._rows(scores, 1.0), out)  # s beta2 - log2 Z
        if rows_normalised is None and cols_normalised is None:
            return out
        mask = rows_normalised[:, None] if rows_normalised is not None else cols_normalised[None, :]
        return torch.where(mask, out, scores, out=out)

    def t2i_tile(self, scores: torch.Tensor, items: tuple[int, int], texts: tuple[int, int],
                 spare: torch.Tensor, work: torch.Tensor) -> torch.Tensor:
        """Text-to-image keys of the tile (in ``spare``; ``scores`` itself without a text bank)."""
        if self.t2i is None:
            return scores
        normalised = self.t2i[1]
        cols = None if normalised is None else normalised[texts[0]:texts[1]]
        return self._normalised(scores, self._block("t2i", *items), None, cols, spare)

    def i2t_tile(self, scores: torch.Tensor, items: tuple[int, int], texts: tuple[int, int],
                 spare: torch.Tensor, work: torch.Tensor) -> torch.Tensor:
        """Image-to-text keys of the tile, after :meth:`t2i_tile` (in ``spare``, or ``scores``)."""
        if self.i2t is None:
            return scores
        normalised = self.i2t[1]
        rows = None if normalised is None else normalised[items[0]:items[1]]
        return self._normalised(scores, self._block("i2t", *texts), rows, None, spare)

    def _block(self, direction: str, g0: int, g1: int) -> torch.Tensor:
        """-log2 Z of gallery entries g0 .. g1 - 1 of ``direction`` as a tile broadcasts it: (k, 1)
        per item for text-to-image, (1, k) per text for image-to-text (made once a block)."""
        view = self._blocks.get((direction, g0, g1))
        if view is None:
            minus = self._minus[direction][g0:g1]
            view = self._blocks[direction, g0, g1] = minus[:, None] if direction == "t2i" else minus[None, :]
        return view

    def rows(self, direction: str, scores: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """(Q, G) keys of whole rows ``scores`` of ``queries``."""
        bank = self.t2i if direction == "t2i" else self.i2t
        if bank is None:
            return scores
        normalised = bank[1]
        rows = None if normalised is None else normalised[queries]
        return self._normalised(scores, self._minus[direction][None, :], rows, None, torch.empty_like(scores))

    @staticmethod
    def safe(keys: torch.Tensor) -> torch.Tensor:
        """Whether each positive's key is a threshold: finite (always, here)."""
        return torch.isfinite(keys)

    def direct_rows(self, direction: str, scores: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """Keys are always finite here: the same keys (float64)."""
        return self.rows(direction, scores, queries).double()


class QueryBankChoice:
    """QB-Norm ranked in one grouped pass, without a pass for the raw top-1s first: a direction
    with a bank is counted under both its raw scores and its normalised keys (every query
    normalised), the raw top-1 of each query is found in the same tiles, and each query then
    takes the count of its case (:meth:`choose`). ``t2i`` / ``i2t``: ``(log_z, active)`` of the
    bank pass (``active`` (G,): the gallery's activation set), or None."""

    def __init__(self, beta: float, t2i: tuple[torch.Tensor, torch.Tensor] | None,
                 i2t: tuple[torch.Tensor, torch.Tensor] | None) -> None:
        self.beta, self.t2i, self.i2t = beta, t2i, i2t

    def alternatives(self, direction: str) -> list[QueryBankKeys | None]:
        """[raw] without a bank, [raw, normalised] with one (None: the raw scores)."""
        bank = self.t2i if direction == "t2i" else self.i2t
        if bank is None:
            return [None]
        every = (bank[0], None)
        return [None, QueryBankKeys(self.beta, *((every, None) if direction == "t2i" else (None, every)))]

    def tile_counter(self, cols: list[_count_kernels.Channel], rows: list[_count_kernels.Channel],
                     top1: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> _count_kernels.TileCounter | None:
        """A counter of every channel of the grouped pass's off-diagonal tiles (``cols``: the
        texts' channels in :meth:`alternatives`' order, ``rows``: the items') with the raw
        top-1s ``top1`` (direction -> (best, index) of its queries) of the directions with a
        bank, as the pass would count and track them one by one, in one compiled read of a tile
        where numba's loops are loaded (:func:`~vlr_plugins.eval._count_kernels.query_bank_counter`);
        None elsewhere."""
        sides = []
        for direction, channels in (("t2i", cols), ("i2t", rows)):
            bank = self.t2i if direction == "t2i" else self.i2t
            sides.append((channels[0], None if bank is None else (bank[0], channels[1], *top1[direction])))
        return _count_kernels.query_bank_counter(self.beta / _LN2, *sides)

    def choose(self, direction: str, top1: torch.Tensor) -> torch.Tensor:
        """(Q,) whether each query is normalised, from its raw top-1 gallery entry (Q,)."""
        return (self.t2i if direction == "t2i" else self.i2t)[1][top1]
