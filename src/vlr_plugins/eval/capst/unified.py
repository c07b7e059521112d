"""CaRe's unified score (CaReBench Table 5): one number for retrieval and captioning."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from vlr_plugins.errors import ConfigError

__all__ = ["load_capst_result", "unified_score"]

_PREFERRED = ("carebench/general", "carebench")


def _retrieval_metrics(retrieval: Mapping[str, Any], benchmark: str | None) -> Mapping[str, Any]:
    if "t2i_r1" in retrieval and "i2t_r1" in retrieval:
        return retrieval
    per_bench = retrieval.get("recall")
    if not isinstance(per_bench, Mapping) or not per_bench:
        raise ConfigError("retrieval results: expected recall metrics (t2i_r1, i2t_r1) or "
                          f"{{'recall': {{benchmark: metrics}}}}, found keys {sorted(retrieval)}")
    if benchmark is None:
        candidates = [b for b in _PREFERRED if b in per_bench]
        if not candidates and len(per_bench) == 1:
            candidates = list(per_bench)
        if not candidates:
            raise ConfigError(f"retrieval results hold several benchmarks ({', '.join(per_bench)}); "
                              "name the CaReBench general one with benchmark=")
        benchmark = candidates[0]
    if benchmark not in per_bench:
        raise ConfigError(f"retrieval results: no benchmark {benchmark!r} "
                          f"(found {', '.join(per_bench)})")
    metrics = per_bench[benchmark]
    missing = [k for k in ("t2i_r1", "i2t_r1") if k not in metrics]
    if missing:
        raise ConfigError(f"retrieval results for {benchmark!r}: missing {', '.join(missing)}")
    return metrics


def _capst_f1(capst: Mapping[str, Any], where: str) -> tuple[float, float]:
    """The overall action and object F1 of CapST results, or a ConfigError naming ``where``."""
    scores = capst.get("scores", capst) if isinstance(capst, Mapping) else None
    try:
        overall = scores["overall"]
        return float(overall["action"]["f1"]), float(overall["object"]["f1"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"{where}: expected {{'overall': {{'action': {{'f1': ...}}, "
                          "'object': {'f1': ...}}} (or that under 'scores'), as `vlr capst` writes") from None


def load_capst_result(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The CapST results of ``path`` (``capst.json`` of ``vlr capst``), checked to hold the
    overall action and object F1 that :func:`unified_score` reads; errors name the file."""
    path = os.fspath(path)
    with open(path, encoding="utf-8") as f:
        try:
            capst = json.load(f)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None
    _capst_f1(capst, path)
    return capst


def unified_score(retrieval: Mapping[str, Any], capst: Mapping[str, Any], *,
                  benchmark: str | None = None) -> dict[str, float]:
    """``{"avg_r1", "avg_f1", "unified"}``: CaRe's unified score and its two halves, in percent.

    - Avg R@1: the mean of text-to-video and video-to-text R@1 on CaReBench *general*
      retrieval (``t2i_r1`` and ``i2t_r1``: the video is the "image" side);
    - Avg F1: the mean of CapST's overall action F1 and object F1;
    - unified score: the mean of the two.

    ``retrieval``: the metrics of :func:`~vlr_plugins.eval.retrieval_recall`, or
    ``{"recall": {benchmark: metrics}}`` as ``vlr eval`` writes (``benchmark`` picks one;
    default ``carebench/general``, then ``carebench``, then the only one). ``capst``: what
    :func:`~vlr_plugins.eval.capst.evaluate_capst` returns (or its ``"scores"``).

    Reference: Xu et al., CaReBench, Table 5 (CaRe: Avg R@1 78.0 = mean(77.0, 79.0) of
    Table 3; Avg F1 33.4 = mean(35.1, 31.7) of Table 2; unified 55.7).

    Example::

        >>> unified_score({"t2i_r1": 77.0, "i2t_r1": 79.0},
        ...               {"overall": {"action": {"f1": 35.1}, "object": {"f1": 31.7}}})["unified"]
        55.7
    """
    metrics = _retrieval_metrics(retrieval, benchmark)
    action, obj = _capst_f1(capst, "CapST results")
    avg_r1 = (float(metrics["t2i_r1"]) + float(metrics["i2t_r1"])) / 2
    avg_f1 = (action + obj) / 2
    return {"avg_r1": avg_r1, "avg_f1": avg_f1, "unified": (avg_r1 + avg_f1) / 2}
