"""Inference-time re-normalisation of the score matrix: dual softmax and QB-Norm, exact in the
engine (``retrieval_recall(..., renorm=...)``).

S is the cosine score matrix (items x texts). Each method replaces the scores a query ranks its
gallery by with transformed ones; ranks are read per direction under the engine's tie rule
(equal transformed scores: the lower gallery index ahead).

* :class:`DualSoftmax` (DSL; CAMoE, Cheng et al. 2021; DRL, Wang et al. 2022; TS2-Net, Liu et
  al. 2022: their inference code is ``sims * softmax(sims * temp, dim=0)``): text-to-image ranks
  item i for text j by ``T(i, j) = s_ij exp(tau s_ij - L_i)``, L_i the log-sum-exp of ``tau s_ij'``
  over all texts j'; image-to-text ranks text j for item i by ``s_ij exp(tau s_ij - L'_j)``, L'_j
  over all items.
* :class:`QueryBankNorm` (QB-Norm, Bogolin et al., CVPR 2022; its official code,
  ioanacroi/qb-norm ``dynamic_inverted_softmax.py``, ``qb_norm``): a bank of queries of one
  direction (e.g. training captions for text-to-image) gives ``Z_g = sum_b exp(beta s_bg)`` per
  gallery entry and the activation set (gallery entries in the top k of some bank query); a test
  query whose raw top-1 (lower index on ties) is in the set ranks by ``exp(beta s_qg) / Z_g``,
  the others by their raw scores.

How they are computed exactly: :mod:`~vlr_plugins.eval.renorm_pass` (the statistics: for the
dual softmax one tiled pass over the matrix, for QB-Norm one over bank x gallery) and
:mod:`~vlr_plugins.eval.renorm_keys` (the transformed scores of a tile or a row, the same
float32 operations for both); then the rank pass. So each costs two products of the matrix's
size (QB-Norm: of the bank's), not three.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from vlr_plugins.eval import _count_kernels
from vlr_plugins.eval._tiles import ScoreMatrix
from vlr_plugins.eval.renorm_keys import DualSoftmaxKeys, QueryBankChoice, QueryBankKeys
from vlr_plugins.eval.renorm_pass import bank_pass, ensure_share, normalised_queries, test_pass

__all__ = ["DualSoftmax", "QueryBankNorm", "Renorm", "renorm_keys", "renorm_record"]


@dataclass(frozen=True)
class DualSoftmax:
    """Dual softmax (DSL) at inference: ``sims * softmax(sims * temperature, dim=0)`` per
    direction. ``temperature`` multiplies the cosine scores (100 in CAMoE's, DRL's and TS2-Net's
    inference code, which score unit vectors); the ``* len(sims)`` some repositories add does not
    change ranks."""

    temperature: float = 100.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and 0 < self.temperature <= 300):
            raise ValueError(f"DualSoftmax temperature must lie in (0, 300], found {self.temperature!r}")

    def record(self) -> dict:
        return {"method": "dsl", "temperature": float(self.temperature)}


@dataclass(frozen=True)
class QueryBankNorm:
    """QB-Norm with the dynamic inverted softmax. ``text_bank`` (B, D): queries of the
    text-to-image direction (e.g. the training captions' embeddings), ``item_bank`` (B', D): of
    image-to-text; either or both. ``beta`` and ``k`` as in the official code (defaults 20 and 1:
    its ``--beta`` and ``--k``)."""

    text_bank: torch.Tensor | None = field(default=None, repr=False)
    item_bank: torch.Tensor | None = field(default=None, repr=False)
    beta: float = 20.0
    k: int = 1

    def __post_init__(self) -> None:
        if self.text_bank is None and self.item_bank is None:
            raise ValueError("QueryBankNorm needs a text_bank (text-to-image), an item_bank (image-to-text) or both")
        for name in ("text_bank", "item_bank"):
            bank = getattr(self, name)
            if bank is not None and (not isinstance(bank, torch.Tensor) or bank.ndim != 2 or len(bank) == 0):
                shape = tuple(bank.shape) if isinstance(bank, torch.Tensor) else type(bank).__name__
                raise ValueError(f"QueryBankNorm {name} must be a non-empty (B, D) tensor, found {shape}")
        if not (math.isfinite(self.beta) and 0 < self.beta <= 300):
            raise ValueError(f"QueryBankNorm beta must lie in (0, 300], found {self.beta!r}")
        if int(self.k) != self.k or self.k < 1:
            raise ValueError(f"QueryBankNorm k must be an integer >= 1, found {self.k!r}")

    def check_dim(self, dim: int) -> None:
        """ValueError when a bank's dimension is not the embeddings' ``dim``."""
        for name in ("text_bank", "item_bank"):
            bank = getattr(self, name)
            if bank is not None and bank.shape[1] != dim:
                raise ValueError(f"QueryBankNorm {name} has dimension {bank.shape[1]}, the embeddings {dim}")

    def record(self) -> dict:
        return {"method": "qbnorm", "beta": float(self.beta), "k": int(self.k),
                "text_bank": None if self.text_bank is None else len(self.text_bank),
                "item_bank": None if self.item_bank is None else len(self.item_bank)}


Renorm = DualSoftmax | QueryBankNorm


def renorm_record(renorm: Renorm | None) -> dict | None:
    """What a result records of ``renorm``: e.g. ``{"method": "dsl", "temperature": 100.0}``."""
    return None if renorm is None else renorm.record()


def renorm_keys(renorm: Renorm, matrix: ScoreMatrix,
                grouped: bool = False) -> DualSoftmaxKeys | QueryBankKeys | QueryBankChoice:
    """The statistics of ``renorm`` over ``matrix`` (one tiled pass over the matrix, and one
    over each bank x its gallery), as the keys the rank passes compare. ``grouped``: the ranks
    come from the grouped pass, which finds QB-Norm's raw top-1s itself
    (:class:`~vlr_plugins.eval.renorm_keys.QueryBankChoice`: no pass over the matrix first),
    unless the banks leave so few gallery entries inactive that each query's case is found first
    (:func:`~vlr_plugins.eval.renorm_pass.normalised_queries`; with torch's counting): then
    :class:`~vlr_plugins.eval.renorm_keys.QueryBankKeys` key every query in the tiles, and the
    few not normalised are ranked by their raw rows."""
    if isinstance(renorm, DualSoftmax):
        ensure_share(matrix.n_items * matrix.n_texts, matrix.device)
        found = test_pass(matrix, tau2=renorm.temperature / math.log(2.0))
        return DualSoftmaxKeys(renorm.temperature, found["item_lse"], found["text_lse"])
    if not isinstance(renorm, QueryBankNorm):
        raise TypeError(f"renorm must be a DualSoftmax or a QueryBankNorm, found {type(renorm).__name__}")
    renorm.check_dim(matrix.dim)
    banks = (renorm.text_bank, renorm.item_bank)
    beta2 = renorm.beta / math.log(2.0)
    passes = [len(bank) * len(gallery) for bank, gallery in zip(banks, (matrix.items, matrix.texts)) if bank is not None]
    ensure_share(max(passes + ([] if grouped else [matrix.n_items * matrix.n_texts])), matrix.device)
    found = {} if grouped else test_pass(matrix, top1=tuple(bank is not None for bank in banks))
    directions = []
    for bank, gallery, top1 in zip(banks, (matrix.items, matrix.texts), ("t2i_top1", "i2t_top1")):
        if bank is None:
            directions.append(None)
            continue
        log_z, active = bank_pass(matrix, bank, gallery, beta2, int(renorm.k))
        directions.append((log_z, active) if grouped else (log_z, active[found[top1]]))
    if not grouped:
        return QueryBankKeys(renorm.beta, *directions)
    if not _count_kernels.enabled():  # numba's loops count both cases and the top-1s in one read of a tile
        # where the inactive entries are few, each query's case is known first: one channel, no top-1s
        known = [None if d is None else normalised_queries(matrix, direction, d[1])
                 for d, direction in zip(directions, ("t2i", "i2t"))]
        if all(k is not None for k, d in zip(known, directions) if d is not None):
            raw = {direction: (~k).nonzero().flatten() for k, direction in zip(known, ("t2i", "i2t"))
                   if k is not None}
            return QueryBankKeys(renorm.beta, *(None if d is None else (d[0], None) for d in directions),
                                 raw_queries={d: q for d, q in raw.items() if len(q)})
    return QueryBankChoice(renorm.beta, *directions)
