"""ReBias: CaReBench's spatiotemporal retrieval bias, as its Table 4 computes it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from vlr_plugins.registry import METRICS

__all__ = ["rebias"]


def _mean_recall(recalls: Mapping[str, float], keys: Sequence[str], which: str) -> float:
    missing = [k for k in keys if k not in recalls]
    if missing:
        raise KeyError(f"rebias: {which} recalls lack {missing}; expected {list(keys)} "
                       f"(retrieval_recall's keys), found {sorted(recalls)}")
    values = [float(recalls[k]) for k in keys]
    bad = [(k, v) for k, v in zip(keys, values) if not math.isfinite(v) or v < 0]
    if bad:
        raise ValueError(f"rebias: {which} recalls must be finite and >= 0, found {bad}")
    return sum(values) / len(values)


def rebias(spatial: Mapping[str, float], temporal: Mapping[str, float], *,
           ks: Sequence[int] = (1, 5, 10)) -> float:
    """ReBias% of CaReBench: how unevenly a model retrieves by static vs dynamic content.

    Expects two :func:`~vlr_plugins.eval.retrieval_recall` results (percent), one on
    CaReBench's spatial captions and one on its temporal captions (see
    ``RetrievalSet.with_texts("spatial")``). From each it uses the six recalls of Table 4,
    ``t2i_r{k}`` (Text-to-Video) and ``i2t_r{k}`` (Video-to-Text) for ``k`` in ``ks``, and
    averages them with equal weight into R̄_spatial and R̄_temporal. Returns percent, like
    the table's ReBias% column (lower is better, 0 = balanced)::

        ReBias% = 100 * |1 - R̄_spatial / R̄_temporal|

    Reference: Xu et al., CaReBench (2025), sec. 3.4.1 and Table 4.

    Note on the formula: eq. (1) of the paper prints B = |1 - R̄_temporal / R̄_spatial|,
    but that does not reproduce Table 4 (CLIP B/16: 15.08 against the printed 17.75;
    MiniCPM-V 2.6, the one model whose temporal recall is higher: 32.29 against 24.41).
    The inverted ratio above does: 16 of the 17 rows agree within the rounding of the
    one-decimal recalls. The exception is contrastively trained InternVL2 8B, printed
    25.02 where its recalls give 24.23 (24.08 to 24.39 for any recalls that round to the
    printed ones); no other reading of the columns (ratio either way, any subset of the
    six recalls, a mean of per-recall ratios, per-direction averages) yields 25.02 while
    keeping the other rows, so that entry is taken to be an erratum in the table. Both
    readings are 0 exactly when the two means are equal; they differ in what the gap is
    measured against (here the temporal recall).

    Relations: ``retrieval_recall`` produces the inputs; with the default ``ks`` each
    mean equals that result's ``r_mean``.

    Example::

        >>> spatial = {"t2i_r1": 45.6, "t2i_r5": 79.0, "t2i_r10": 89.2,
        ...            "i2t_r1": 47.6, "i2t_r5": 80.9, "i2t_r10": 90.8}  # CLIP B/16, Table 4
        >>> temporal = {"t2i_r1": 30.3, "t2i_r5": 65.1, "t2i_r10": 79.8,
        ...             "i2t_r1": 35.8, "i2t_r5": 71.0, "i2t_r10": 85.8}
        >>> round(rebias(spatial, temporal), 2)
        17.75
    """
    if not ks:
        raise ValueError("rebias: ks must name at least one k")
    keys = [f"{d}_r{k}" for d in ("t2i", "i2t") for k in ks]
    mean_spatial = _mean_recall(spatial, keys, "spatial")
    mean_temporal = _mean_recall(temporal, keys, "temporal")
    if mean_temporal == 0:
        raise ValueError(f"rebias: the temporal recalls {keys} are all 0, so the bias is undefined")
    return 100.0 * abs(1.0 - mean_spatial / mean_temporal)


METRICS.register(rebias, name="rebias")
