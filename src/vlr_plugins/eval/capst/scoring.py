"""CapST's scores: per sample, the share of elements entailed; per corpus, the means of
those shares and the F1 of the means, overall and per category (CaReBench Table 2)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from vlr_plugins.data.readers.carebench import CAREBENCH_CATEGORIES

__all__ = ["SCORE_KINDS", "capst_table", "corpus_scores", "entailed_share", "f1_score"]

#: Table 2's two columns and the element kind each is scored on
SCORE_KINDS = {"action": "events", "object": "objects"}


def entailed_share(labels: Sequence[str]) -> float:
    """Share of judged elements labelled ``"entailment"``, in [0, 1]; 1.0 for no element.

    Recall is this share for the reference's elements judged against the predicted
    caption; precision, for the predicted caption's elements judged against the reference.
    An empty list scores 1.0, as in the released code: nothing to find, nothing invented.
    """
    if not labels:
        return 1.0
    return sum(label == "entailment" for label in labels) / len(labels)


def f1_score(recall: float, precision: float) -> float:
    """``2 R P / (R + P)``, and 0 when both are 0."""
    return 0.0 if recall + precision == 0 else 2 * recall * precision / (recall + precision)


def corpus_scores(recalls: Sequence[float], precisions: Sequence[float]) -> dict[str, float | int]:
    """``{"f1", "recall", "precision", "n"}`` of a set of samples, in percent.

    recall and precision: the means of the samples' shares; f1: the F1 of those two means
    (not the mean of per-sample F1s, which the paper does not use). No sample gives NaNs.

    Example::

        >>> corpus_scores([1.0, 0.0], [0.0, 1.0])   # each sample's own F1 is 0
        {'f1': 50.0, 'recall': 50.0, 'precision': 50.0, 'n': 2}
    """
    if len(recalls) != len(precisions):
        raise ValueError(f"one precision per recall expected, found {len(recalls)} and "
                         f"{len(precisions)}")
    if not recalls:
        return {"f1": float("nan"), "recall": float("nan"), "precision": float("nan"), "n": 0}
    r = sum(recalls) / len(recalls)
    p = sum(precisions) / len(precisions)
    return {"f1": 100 * f1_score(r, p), "recall": 100 * r, "precision": 100 * p, "n": len(recalls)}


def _groups(categories: Iterable[str | None]) -> list[str]:
    present = {c for c in categories if c is not None}
    known = [c for c in CAREBENCH_CATEGORIES if c in present]
    return known + sorted(present - set(known))


def capst_table(samples: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, float | int]]]:
    """Table 2's cells: ``{group: {"action": scores, "object": scores}}`` in percent.

    samples: ``{"category": str | None, "action": {"recall", "precision"}, "object": {...}}``
    with shares in [0, 1]. Groups are the categories present (CaReBench's four first, in
    the paper's order), then ``"overall"``, the mean over all samples (each sample counts
    once, whatever its category's size).
    """
    groups = {g: [s for s in samples if s.get("category") == g]
              for g in _groups(s.get("category") for s in samples)}
    groups["overall"] = list(samples)
    return {g: {col: corpus_scores([s[col]["recall"] for s in members],
                                   [s[col]["precision"] for s in members])
                for col in SCORE_KINDS}
            for g, members in groups.items()}
