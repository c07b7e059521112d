"""The names of the metrics the engine reports, and what a report needs to know of each.

The rank metrics beside recall@k (:func:`parse_rank_metric`, :data:`RANK_METRICS`):
``mdr``, ``mnr`` and ``mrr@K`` are functions of each query's best positive's rank
(:mod:`~vlr_plugins.eval.best_rank_metrics`); ``map@K`` and ``ndcg@K`` are graded over every
positive of a query (:mod:`~vlr_plugins.eval.graded_metrics`, :data:`GRADED`), so the engine
ranks every positive pair for them.

``vlr eval --metrics`` takes ``r@K`` (recall at K, percent) or any rank metric, so a rank
metric added to the engine is a ``--metrics`` name at once. Names are case-insensitive
(``R@1``, ``MdR``). Each is computed in both directions; its key in a
:func:`~vlr_plugins.eval.retrieval_recall` result is ``i2t_r5``, ``t2i_mdr``,
``i2t_mrr@10``, ... (:func:`result_key`).

- :func:`parse_metrics` checks a list of names (known, K >= 1, each once) into a
  :class:`MetricChoice`: the recall ``ks`` and the ``rank_metrics`` to pass to the engine;
- :meth:`MetricChoice.check_gallery`: every K at most the gallery of both directions;
- :func:`metric_label` (``R@1``, ``MdR↓``, ``MRR@10``, ``mAP@10``, ``nDCG@10``),
  :func:`lower_is_better` (MdR, MnR), :func:`metric_digits` and :func:`metric_unit`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from vlr_plugins.errors import UsageError

__all__ = ["DEFAULT_METRICS", "DIRECTIONS", "GRADED", "RANK_METRICS", "MetricChoice", "known_metrics",
           "lower_is_better", "metric_digits", "metric_label", "metric_of_key", "metric_unit", "parse_metrics",
           "parse_rank_metric", "result_key"]

#: the rank metric names the engine takes (``K`` any integer >= 1)
RANK_METRICS = ("mdr", "mnr", "mrr@K", "map@K", "ndcg@K")
#: the kinds that need the rank of every positive pair, not only the best one
GRADED = frozenset({"map", "ndcg"})
_AT_K = re.compile(r"(mrr|map|ndcg)@([1-9][0-9]*)")


def parse_rank_metric(name: str) -> tuple[str, int | None]:
    """``("mdr", None)``, ``("mnr", None)``, or ``(kind, k)`` for ``"mrr@k"``, ``"map@k"`` and
    ``"ndcg@k"``; ``ValueError`` naming the known metrics otherwise."""
    if name in ("mdr", "mnr"):
        return name, None
    found = _AT_K.fullmatch(name) if isinstance(name, str) else None
    if found:
        return found.group(1), int(found.group(2))
    raise ValueError(f"unknown rank metric {name!r}; known: {', '.join(RANK_METRICS)}")


#: what ``vlr eval`` computes without ``--metrics``
DEFAULT_METRICS = ("r@1", "r@5", "r@10")
DIRECTIONS = ("i2t", "t2i")

_RECALL = re.compile(r"r@([0-9]+)")
_WITH_K = re.compile(r"([a-z]+)@(-?[0-9]+)")
_LOWER_IS_BETTER = frozenset({"mdr", "mnr"})  # ranks: 1 is best
_SHOWN = {"r": "R", "mdr": "MdR", "mnr": "MnR", "mrr": "MRR", "map": "mAP", "ndcg": "nDCG"}


def known_metrics() -> str:
    """The names ``--metrics`` takes, for messages: ``r@K, mdr, mnr, mrr@K, ...``."""
    return ", ".join(("r@K", *RANK_METRICS))


def _kind(name: str) -> tuple[str, int | None]:
    """``("r", 5)`` for ``r@5``, else :func:`parse_rank_metric` (``ValueError`` when unknown)."""
    found = _RECALL.fullmatch(name)
    if found:
        return "r", int(found.group(1))
    return parse_rank_metric(name)


def _canonical(raw: str, option: str) -> tuple[str, str, int | None]:
    """``(name, kind, k)`` of one given name, lower-cased; unknown names and K < 1 refused."""
    name = raw.strip().lower()
    with_k = _WITH_K.fullmatch(name)
    if with_k and int(with_k.group(2)) < 1:
        try:  # a name the engine knows, with a K it does not take
            _kind(f"{with_k.group(1)}@1")
        except ValueError:
            pass
        else:
            raise UsageError(option, f"{raw.strip()!r}: K must be >= 1 (the top K of each query's gallery)")
    try:
        kind, k = _kind(name)
    except ValueError:
        raise UsageError(option, f"unknown metric {raw.strip()!r}; known: {known_metrics()} "
                                 "(K an integer >= 1, e.g. r@1,r@5,r@10,mdr,mnr,mrr@10)") from None
    if kind == "r":
        name = f"r@{k}"  # r@05 -> r@5
    return name, kind, k


def result_key(name: str, direction: str) -> str:
    """``result_key("r@5", "i2t") == "i2t_r5"``; ``result_key("mrr@10", "t2i") == "t2i_mrr@10"``."""
    kind, k = _kind(name)
    return f"{direction}_r{k}" if kind == "r" else f"{direction}_{name}"


def metric_of_key(key: str) -> tuple[str, str]:
    """``(direction, name)`` of a result key: ``"t2i_r5"`` -> ``("t2i", "r@5")``; ``ValueError``
    for a key that is no metric (``r_mean``, ``i2t_ranks``)."""
    direction, sep, rest = key.partition("_")
    if not sep or direction not in DIRECTIONS:
        raise ValueError(f"{key!r} is no metric key (expected i2t_ or t2i_ and a metric)")
    name = f"r@{rest[1:]}" if re.fullmatch(r"r[0-9]+", rest) else rest
    try:
        _kind(name)
    except ValueError:
        raise ValueError(f"{key!r} is no metric key; known metrics: {known_metrics()}") from None
    return direction, name


def lower_is_better(name: str) -> bool:
    """True for MdR and MnR (a rank: 1 is best); recall, MRR, mAP, nDCG are higher-is-better."""
    return _kind(name)[0] in _LOWER_IS_BETTER


def metric_label(name: str) -> str:
    """The header of a metric: ``R@1``, ``MdR↓``, ``MnR↓``, ``MRR@10``, ``mAP@10``, ``nDCG@10``."""
    kind, k = _kind(name)
    shown = _SHOWN.get(kind, kind.upper()) + ("" if k is None else f"@{k}")
    return shown + ("↓" if kind in _LOWER_IS_BETTER else "")


def metric_digits(name: str) -> int:
    """Decimals a report shows: 1 for recall (percent) and ranks, 3 for scores in [0, 1]."""
    kind, k = _kind(name)
    return 1 if kind == "r" or kind in _LOWER_IS_BETTER else 3


def metric_unit(name: str) -> str:
    """An axis label: ``recall (%)``, ``rank (lower is better)`` or ``score (0-1)``."""
    kind, _ = _kind(name)
    if kind == "r":
        return "recall (%)"
    return "rank (lower is better)" if kind in _LOWER_IS_BETTER else "score (0-1)"


@dataclass(frozen=True)
class MetricChoice:
    """Checked metric names (:func:`parse_metrics`): ``names`` in the order given, ``ks``
    the recall cut-offs, ``rank_metrics`` the rest (the engine's ``ks=`` and
    ``rank_metrics=``); ``option`` the option or argument they came from, named in errors."""

    names: tuple[str, ...]
    ks: tuple[int, ...]
    rank_metrics: tuple[str, ...]
    option: str = "metrics"

    def keys(self) -> list[str]:
        """The result keys, direction-major: ``i2t_r1, ..., t2i_r1, ...``."""
        return [result_key(n, d) for d in DIRECTIONS for n in self.names]

    def check_gallery(self, benchmark: str, n_items: int, n_texts: int, where: str = "") -> None:
        """Every K at most both galleries of ``benchmark``: its ``n_items`` items (text-to-item)
        and ``n_texts`` texts (item-to-text); else one :class:`UsageError` naming both."""
        smallest = min(n_items, n_texts)
        for name in self.names:
            k = _kind(name)[1]
            if k is not None and k > smallest:
                raise UsageError(self.option, f"{name} looks at the top {k}, but benchmark {benchmark!r}"
                                              f"{f' ({where})' if where else ''} has {n_items} items (the gallery "
                                              f"of text-to-item retrieval) and {n_texts} texts (the gallery of "
                                              f"item-to-text retrieval); choose K <= {smallest}")


def parse_metrics(names: str | Sequence[str] | None, option: str = "metrics") -> MetricChoice:
    """Check ``names`` (``"r@1,mdr"`` or a list) into a :class:`MetricChoice`; ``None`` or empty:
    :data:`DEFAULT_METRICS`. Unknown names, K < 1 and a name given twice are one
    :class:`~vlr_plugins.errors.UsageError` naming ``option``."""
    if names is None or (isinstance(names, str) and not names.strip()):
        names = DEFAULT_METRICS
    raw = [n for n in names.split(",")] if isinstance(names, str) else list(names)
    if not raw or any(not str(n).strip() for n in raw):
        raise UsageError(option, f"expected metric names separated by commas, such as r@1,r@5,mdr, found "
                                 f"{','.join(map(str, raw))!r}")
    parsed = [_canonical(str(n), option) for n in raw]
    chosen = [name for name, _, _ in parsed]
    twice = sorted({n for n in chosen if chosen.count(n) > 1})
    if twice:
        raise UsageError(option, f"{', '.join(twice)} named twice in {','.join(map(str, raw))!r}")
    return MetricChoice(tuple(chosen), tuple(k for _, kind, k in parsed if kind == "r"),
                        tuple(name for name, kind, _ in parsed if kind != "r"), option)
