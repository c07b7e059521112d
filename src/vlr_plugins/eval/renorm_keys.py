"""The transformed scores a query ranks its gallery by under a re-normalisation
(:mod:`~vlr_plugins.eval.renorm`), for a tile of the grouped pass and for whole rows.

A tile holds items x texts; its text-to-image keys are compared column-wise (each text
against the items), its image-to-text keys row-wise. A row holds queries x the whole gallery
(``"t2i"``: texts x items, ``"i2t"``: items x texts). Both apply the same float32 operations to
each score, in the same order, so a pair gets the same key bits in a tile and in a row.

Keys are monotone in the papers' transformed scores, in log2 units where that avoids float32
underflow:

* dual softmax: for ``s > 0`` the key is ``log2(s) + s tau / ln 2 - L`` (L the log2-sum-exp2 of
  the query-side column: per item for text-to-image, per text for image-to-text), i.e.
  ``log2(s exp(tau s - L ln 2))``; a score ``<= 0`` gives -inf, which no comparison
  puts ahead (its transformed score is <= 0, below every positive one). A query whose
  positive has a score <= 0 (non-finite key) is ranked from float64 transformed scores instead
  (:meth:`DualSoftmaxKeys.direct_rows`: ``s exp(tau s - L)``, no underflow while tau <= 300).
* QB-Norm: a normalised query's key is ``s beta / ln 2 - log2 Z_g`` (``log2(exp(beta s) / Z_g)``),
  any other query's its raw score.
"""

from __future__ import annotations

import math

import torch

__all__ = ["DualSoftmaxKeys", "QueryBankKeys"]

_LN2 = math.log(2.0)
_INF = float("inf")


def _log2_key(scores: torch.Tensor, tau2: float, out: torch.Tensor, work: torch.Tensor) -> torch.Tensor:
    """out = log2(scores) + scores * tau2 where scores > 0, -inf elsewhere, elementwise (work:
    float32 scratch of the same shape, last dimension contiguous).

    The logarithm is taken of ``|scores|`` and the scores <= 0 set to -inf afterwards: a NaN or
    -inf result takes the slow path of log2 (~10x on CPU), and about half the scores of unrelated
    pairs are negative. The mask is written over ``work`` (viewed as bytes), so no buffer is added."""
    torch.abs(scores, out=out).log2_()
    torch.mul(scores, tau2, out=work)
    out.add_(work)
    mask = work.view(torch.bool)[..., :scores.shape[-1]]  # the first quarter of each row of work
    torch.le(scores, 0, out=mask)
    return out.masked_fill_(mask, -_INF)


class DualSoftmaxKeys:
    """Dual-softmax keys from ``item_lse`` (N,) and ``text_lse`` (M,): float32 log2-sum-exp2 of
    ``s tau / ln 2`` over each item's row and each text's column."""

    def __init__(self, temperature: float, item_lse: torch.Tensor, text_lse: torch.Tensor) -> None:
        self.temperature, self.tau2 = temperature, temperature / _LN2
        self.item_lse, self.text_lse = item_lse, text_lse

    def t2i_tile(self, scores: torch.Tensor, items: tuple[int, int], texts: tuple[int, int],
                 spare: torch.Tensor, work: torch.Tensor) -> torch.Tensor:
        """Text-to-image keys of the tile ``scores`` (items[0]:items[1] x texts[0]:texts[1]),
        written over ``scores``; ``spare`` keeps what :meth:`i2t_tile` needs (call it next)."""
        _log2_key(scores, self.tau2, spare, work)
        return torch.sub(spare, self.item_lse[items[0]:items[1], None], out=scores)

    def i2t_tile(self, scores: torch.Tensor, items: tuple[int, int], texts: tuple[int, int],
                 spare: torch.Tensor, work: torch.Tensor) -> torch.Tensor:
        """Image-to-text keys of the same tile, after :meth:`t2i_tile` (written over ``scores``)."""
        return torch.sub(spare, self.text_lse[texts[0]:texts[1]], out=scores)

    def rows(self, direction: str, scores: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """(Q, G) keys of whole rows ``scores`` of ``queries`` (a new tensor)."""
        key = _log2_key(scores, self.tau2, torch.empty_like(scores), torch.empty_like(scores))
        return key.sub_((self.item_lse if direction == "t2i" else self.text_lse)[None, :])

    def direct_rows(self, direction: str, scores: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """(Q, G) float64 transformed scores ``s exp(tau s - L)`` of whole rows."""
        lse = (self.item_lse if direction == "t2i" else self.text_lse).double() * _LN2
        s = scores.double()  # then one more float64 row, computed in place
        out = torch.mul(s, self.temperature).sub_(lse[None, :]).exp_()
        return out.mul_(s)


class QueryBankKeys:
    """QB-Norm keys: per direction with a bank, ``log_z`` (G,) float32 log2 Z of its gallery
    and ``normalised`` (Q,) which of its queries are normalised; ``None`` where no bank."""

    def __init__(self, beta: float, t2i: tuple[torch.Tensor, torch.Tensor] | None,
                 i2t: tuple[torch.Tensor, torch.Tensor] | None) -> None:
        self.beta2 = beta / _LN2
        self.t2i, self.i2t = t2i, i2t

    def _normalised(self, scores: torch.Tensor, log_z: torch.Tensor, rows_normalised: torch.Tensor | None,
                    cols_normalised: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
        torch.mul(scores, self.beta2, out=out)
        out.sub_(log_z)
        mask = rows_normalised[:, None] if rows_normalised is not None else cols_normalised[None, :]
        return torch.where(mask, out, scores, out=out)

    def t2i_tile(self, scores: torch.Tensor, items: tuple[int, int], texts: tuple[int, int],
                 spare: torch.Tensor, work: torch.Tensor) -> torch.Tensor:
        """Text-to-image keys of the tile (in ``spare``; ``scores`` itself without a text bank)."""
        if self.t2i is None:
            return scores
        log_z, normalised = self.t2i
        return self._normalised(scores, log_z[items[0]:items[1], None], None, normalised[texts[0]:texts[1]], spare)

    def i2t_tile(self, scores: torch.Tensor, items: tuple[int, int], texts: tuple[int, int],
                 spare: torch.Tensor, work: torch.Tensor) -> torch.Tensor:
        """Image-to-text keys of the tile, after :meth:`t2i_tile` (in ``spare``, or ``scores``)."""
        if self.i2t is None:
            return scores
        log_z, normalised = self.i2t
        return self._normalised(scores, log_z[None, texts[0]:texts[1]], normalised[items[0]:items[1]], None, spare)

    def rows(self, direction: str, scores: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """(Q, G) keys of whole rows ``scores`` of ``queries``."""
        bank = self.t2i if direction == "t2i" else self.i2t
        if bank is None:
            return scores
        log_z, normalised = bank
        return self._normalised(scores, log_z[None, :], normalised[queries], None, torch.empty_like(scores))

    def direct_rows(self, direction: str, scores: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """Keys are always finite here: the same keys (float64)."""
        return self.rows(direction, scores, queries).double()
