"""The short-caption vs long-description trade-off: average R@1 (or any metric the results
hold: MdR, MRR@10, ...) per configuration and its Pareto frontier (the paragraph-supervision
paper, sec. 5.3 and Figure 3)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["pareto_frontier", "pareto_summary", "plot_pareto"]

DIRECTIONS = ("i2t", "t2i")
_TITLE = {"i2t": "Image-to-text", "t2i": "Text-to-image"}


def pareto_frontier(points: Mapping[str, tuple[float, float]], *, lower_is_better: bool = False) -> list[str]:
    """The configurations no other one dominates when both coordinates are maximised (with
    ``lower_is_better``, minimised: ranks such as MdR).

    ``q`` dominates ``p`` when it is at least as good on both axes and better on one, so
    configurations with equal points are either all on the frontier or all off it.
    Ordered by increasing first coordinate (hence decreasing second; with
    ``lower_is_better`` increasing), ties in input order.
    """
    sign = -1.0 if lower_is_better else 1.0
    names = list(points)
    frontier = [p for p in names if not any(
        sign * points[q][0] >= sign * points[p][0] and sign * points[q][1] >= sign * points[p][1]
        and points[q] != points[p] for q in names)]
    return sorted(frontier, key=lambda p: points[p][0])


def _average(results: Mapping, config: str, benchmarks: Sequence[str], key: str) -> float:
    values = []
    for bench in benchmarks:
        per_bench = results[config]
        if bench not in per_bench:
            raise KeyError(f"pareto_summary: config {config!r} has no results for benchmark "
                           f"{bench!r}; found {sorted(per_bench)}")
        if key not in per_bench[bench]:
            raise KeyError(f"pareto_summary: results[{config!r}][{bench!r}] lack {key!r}; "
                           f"found {sorted(per_bench[bench])}")
        value = float(per_bench[bench][key])
        if not math.isfinite(value):
            raise ValueError(f"pareto_summary: results[{config!r}][{bench!r}][{key!r}] is {value}")
        values.append(value)
    return sum(values) / len(values)


def pareto_summary(
    results: Mapping[str, Mapping[str, Mapping[str, float]]],
    short: Sequence[str] = ("flickr30k", "coco"),
    long: Sequence[str] = ("sharegpt4v", "docci"),
    *,
    k: int = 1,
    metric: str | None = None,
) -> dict[str, Any]:
    """Average R@k on short-caption vs long-description benchmarks, and who is Pareto-optimal.

    ``results``: config -> benchmark -> metrics, the metrics as
    :func:`~vlr_plugins.eval.retrieval_recall` returns them (``i2t_r{k}``, ``t2i_r{k}``,
    percent). Each benchmark counts once in its group's average, whatever its size.
    ``metric``: instead of R@k, any metric name of ``vlr eval --metrics`` the results hold
    (``"r@5"``, ``"mdr"``, ``"mrr@10"``; :mod:`vlr_plugins.eval.metric_names`); for MdR and
    MnR lower is better, and the frontier minimises both averages.

    Returns (plain JSON types)::

        {"short": [...], "long": [...], "k": 1, "metric": "r@1", "lower_is_better": False,
         "i2t": {"points": {config: {"short": avg, "long": avg}, ...},
                 "frontier": [config, ...]},     # see pareto_frontier
         "t2i": {...}}

    Example::

        summary = pareto_summary({"C1": {"flickr30k": r, "coco": r, "sharegpt4v": r, "docci": r}, ...})
        plot_pareto(summary, "pareto.png")
    """
    if not short or not long:
        raise ValueError(f"pareto_summary needs benchmarks in both groups, found short={list(short)} "
                         f"long={list(long)}")
    if not results:
        raise ValueError("pareto_summary: no configurations")
    from vlr_plugins.eval.metric_names import lower_is_better, parse_metrics, result_key

    name = parse_metrics([metric] if metric is not None else [f"r@{k}"], "metric").names[0]
    lower = lower_is_better(name)
    summary: dict[str, Any] = {"short": list(short), "long": list(long), "k": k, "metric": name,
                               "lower_is_better": lower}
    for direction in DIRECTIONS:
        key = result_key(name, direction)
        points = {config: {"short": _average(results, config, short, key),
                           "long": _average(results, config, long, key)} for config in results}
        frontier = pareto_frontier({c: (p["short"], p["long"]) for c, p in points.items()}, lower_is_better=lower)
        summary[direction] = {"points": points, "frontier": frontier}
    return summary


def plot_pareto(summary: Mapping[str, Any], path: str | os.PathLike, title: str = "") -> None:
    """Figure 3 of the paper: one panel per direction (I2T, T2I), short-caption R@k (or the
    summary's metric) on x, long-description on y, every configuration labelled, the frontier
    drawn as the staircase bounding the region it dominates (for MdR / MnR, lower is better:
    towards the origin, and the axes say so). Written atomically; needs matplotlib."""
    from vlr_plugins.eval.metric_names import metric_label, metric_unit
    from vlr_plugins.eval.report import _pyplot, _save_figure

    plt = _pyplot()
    name = summary.get("metric") or f"r@{summary.get('k', 1)}"
    shown = metric_label(name)
    unit = {"recall (%)": "(%)", "rank (lower is better)": "(rank, lower is better)"}.get(metric_unit(name), "")
    lower = bool(summary.get("lower_is_better"))
    fig, axes = plt.subplots(1, len(DIRECTIONS), figsize=(10, 4.4), squeeze=False)
    for ax, direction in zip(axes[0], DIRECTIONS):
        points = summary[direction]["points"]
        frontier = summary[direction]["frontier"]
        others = [c for c in points if c not in frontier]
        ax.scatter([points[c]["short"] for c in others], [points[c]["long"] for c in others],
                   color="tab:gray", zorder=3, label="dominated")
        xs = [points[c]["short"] for c in frontier]
        ys = [points[c]["long"] for c in frontier]
        ax.scatter(xs, ys, color="tab:red", zorder=4, label="Pareto frontier")
        # from each frontier point the boundary drops to the next one's height, then runs right
        ax.step(xs, ys, where="post" if lower else "pre", color="tab:red", alpha=0.6, zorder=2)
        for config, p in points.items():
            ax.annotate(config, (p["short"], p["long"]), xytext=(4, 4), textcoords="offset points",
                        fontsize=8)
        ax.set_title(f"{_TITLE[direction]} {shown}")
        ax.set_xlabel(f"short-caption {shown} {unit}".rstrip() + f"\nmean of {', '.join(summary['short'])}")
        ax.set_ylabel(f"long-description {shown} {unit}".rstrip() + f"\nmean of {', '.join(summary['long'])}")
        ax.grid(alpha=0.3)
        ax.margins(0.12)
    axes[0][0].legend(fontsize=8, loc="best")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    _save_figure(fig, path)
