"""The papers' result tables (tables.yaml), filled from a ``vlr eval`` result: JSON, Markdown, a plot.

=====================  ==========================================================  ================
name                   columns                                                      paper
=====================  ==========================================================  ================
``mvc-table1``         T2V R@1: MSR-VTT, DiDeMo, ActivityNet, LSMDC, MSVD           MVC, Table 1
``mvc-table3``         T2V R@1: CARE-S, CARE-T, DREAM-D, DREAM-E, S2S-W, S2S-S      MVC, Table 3
``carebench-table3``   general: T2V then V2T, R@1/5/10 each                         CaReBench, Tab. 3
``carebench-table4``   spatial, temporal (T2V then V2T, R@1/5/10 each), ReBias%     CaReBench, Tab. 4
``clip4clip-<bench>``  T2V then V2T, R@1/5/10, MdR↓, MnR↓ (msrvtt, msvd, lsmdc,     CLIP4Clip's
                       didemo, activitynet)                                         layout
=====================  ==========================================================  ================

A column reads one metric of one benchmark's results (``msrvtt``, ``carebench/spatial``; the
metric ``t2i_`` or ``i2t_`` and a name of :mod:`vlr_plugins.eval.metric_names`: ``t2i_r1``,
``i2t_mdr``; :meth:`TableLayout.metrics` the names a run must compute),
or ReBias (:func:`~vlr_plugins.eval.rebias`) from two of them; a benchmark the run did not
score is left empty ("–"), as the papers print an entry they do not have, and so is a ReBias
whose temporal recalls are all 0 (the ratio is undefined).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

__all__ = ["TableColumn", "TableLayout", "fill_table", "list_tables", "plot_table", "table_markdown"]

_EMPTY = "–"
_REBIAS_METRICS = ("r@1", "r@5", "r@10")  # the six recalls ReBias averages


@dataclass(frozen=True)
class TableColumn:
    """One column: ``levels`` its headers (outermost first), and either ``benchmark`` and
    ``metric`` (a key of :func:`~vlr_plugins.eval.retrieval_recall`'s result) or
    ``rebias = (spatial, temporal)`` benchmarks; ``digits`` after the decimal point;
    ``short`` a label for plots (default: :attr:`label`)."""

    levels: tuple[str, ...]
    benchmark: str | None = None
    metric: str | None = None
    rebias: tuple[str, str] | None = None
    digits: int = 1
    short: str | None = None

    @property
    def label(self) -> str:
        """The headers in one string (``"CARE-S R@1"``)."""
        return " ".join(self.levels)

    def benchmarks(self) -> list[str]:
        """The benchmark results it reads."""
        return list(self.rebias) if self.rebias else [self.benchmark]

    def metrics(self) -> list[str]:
        """The metric names (``vlr eval --metrics``) it needs computed: ``["mdr"]``; ReBias R@1/5/10."""
        from vlr_plugins.eval.metric_names import metric_of_key

        return list(_REBIAS_METRICS) if self.rebias else [metric_of_key(self.metric)[1]]


@dataclass(frozen=True)
class TableLayout:
    """A paper's table: its ``name`` (``mvc-table1``), ``title``, the ``protocol`` its
    numbers follow (a name of :func:`~vlr_plugins.eval.list_protocols`; ``None`` for a
    layout without a paper's numbers to follow) and its columns."""

    name: str
    title: str
    protocol: str | None
    columns: tuple[TableColumn, ...]

    def benchmarks(self) -> list[str]:
        """Every benchmark result it reads, in column order, once."""
        return list(dict.fromkeys(b for c in self.columns for b in c.benchmarks()))

    def metrics(self) -> list[str]:
        """Every metric name it needs computed (``vlr eval --metrics``), in column order, once."""
        return list(dict.fromkeys(m for c in self.columns for m in c.metrics()))


def _column(where: str, raw: Any) -> TableColumn:
    if not isinstance(raw, dict) or not isinstance(raw.get("levels"), list) or not raw["levels"]:
        raise ValueError(f"{where}: expected a mapping with a non-empty 'levels' list, found {raw!r}")
    levels = tuple(str(level) for level in raw["levels"])
    common = {"digits": raw.get("digits", 1), "short": raw.get("short")}
    if "rebias" in raw:
        pair = raw["rebias"]
        if not isinstance(pair, dict) or set(pair) != {"spatial", "temporal"}:
            raise ValueError(f"{where}, rebias: expected {{spatial: ..., temporal: ...}}, found {pair!r}")
        return TableColumn(levels, rebias=(pair["spatial"], pair["temporal"]), **common)
    from vlr_plugins.eval.metric_names import known_metrics, metric_of_key

    try:
        metric_of_key(str(raw.get("metric")))
    except ValueError:
        metric = None
    else:
        metric = raw["metric"]
    if not isinstance(raw.get("benchmark"), str) or metric is None:
        raise ValueError(f"{where}: expected a benchmark and a metric, t2i_ or i2t_ and one of {known_metrics()} "
                         f"(t2i_r1, i2t_mdr, ...), found {raw!r}")
    return TableColumn(levels, raw["benchmark"], metric, **common)


@cache
def list_tables() -> dict[str, TableLayout]:
    """Every shipped table layout by name, read once from ``tables.yaml`` and checked."""
    text = resources.files("vlr_plugins.eval").joinpath("tables.yaml").read_text(encoding="utf-8")
    return {name: TableLayout(name, raw["title"], raw.get("protocol"),
                              tuple(_column(f"tables.yaml, table {name!r}, column {i}", c)
                                    for i, c in enumerate(raw["columns"], start=1)))
            for name, raw in yaml.safe_load(text).items()}


def _value(column: TableColumn, recall: Mapping[str, Mapping[str, float]]) -> float | None:
    if any(b not in recall for b in column.benchmarks()):
        return None
    if column.rebias:
        from vlr_plugins.eval.retrieval_bias import rebias

        try:
            return rebias(recall[column.rebias[0]], recall[column.rebias[1]])
        except ValueError:  # every temporal recall 0: the ratio is undefined, left empty
            return None
    result = recall[column.benchmark]
    if column.metric not in result:
        from vlr_plugins.eval.metric_names import metric_of_key

        raise KeyError(f"the results of {column.benchmark!r} lack {column.metric!r}, which column "
                       f"{column.label!r} shows: compute metric {metric_of_key(column.metric)[1]} "
                       f"(vlr eval --metrics); found {sorted(result)}")
    return float(result[column.metric])


def fill_table(layout: TableLayout, recall: Mapping[str, Mapping[str, float]], label: str, *,
               protocol: str | None = None, renorm: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The table of one model (row ``label``), in plain JSON types.

    ``recall``: benchmark -> :func:`~vlr_plugins.eval.retrieval_recall` result (percent),
    as ``evaluate_benchmarks(...)["recall"]``. Returns ``{"name", "title", "protocol" (the
    paper's), "run_protocol" (``protocol``), "columns": [{"label", "short", "levels",
    "digits", "benchmark", "metric"} or {..., "rebias": [spatial, temporal]}], "rows": [{"model": label,
    "values": [value or None, ...]}], "missing": [benchmarks not scored]}``, and with ``renorm``
    (the run's re-normalisation record, ``vlr eval --renorm``) ``"renorm": renorm``.
    """
    columns = []
    for c in layout.columns:
        col: dict[str, Any] = {"label": c.label, "short": c.short or c.label, "levels": list(c.levels),
                               "digits": c.digits}
        col.update({"rebias": list(c.rebias)} if c.rebias else {"benchmark": c.benchmark, "metric": c.metric})
        columns.append(col)
    return {"name": layout.name, "title": layout.title, "protocol": layout.protocol, "run_protocol": protocol,
            "columns": columns, "rows": [{"model": label, "values": [_value(c, recall) for c in layout.columns]}],
            "missing": [b for b in layout.benchmarks() if b not in recall],
            **({"renorm": dict(renorm)} if renorm else {})}


def table_markdown(table: Mapping[str, Any]) -> str:
    """A filled table (:func:`fill_table`) in Markdown, headed as the paper heads it.

    The outermost headers form the header row (a header spanning several columns is
    written once, over its first); inner levels follow as rows of their own, then one row
    per model. Empty entries are "–". A note follows when the run's protocol is not the
    paper's, or benchmarks were not scored; a line when the scores were re-normalised (DSL, QB-Norm).
    """
    columns = table["columns"]
    depth = max(len(c["levels"]) for c in columns)
    levels = [c["levels"] + [""] * (depth - len(c["levels"])) for c in columns]

    def header(d: int) -> list[str]:
        cells = []
        for i, lv in enumerate(levels):
            repeated = i > 0 and levels[i - 1][:d + 1] == lv[:d + 1] and d < len(columns[i]["levels"]) - 1
            cells.append("" if repeated else lv[d])
        return cells

    lines = [f"**{table['title']}**", "", "| Model | " + " | ".join(header(0)) + " |",
             "|" + "---|" * (len(columns) + 1)]
    lines += ["|  | " + " | ".join(header(d)) + " |" for d in range(1, depth)]
    for row in table["rows"]:
        cells = [_EMPTY if v is None else f"{v:.{c['digits']}f}" for v, c in zip(row["values"], columns)]
        lines.append(f"| {row['model']} | " + " | ".join(cells) + " |")
    notes = []
    if table["protocol"] is not None and table.get("run_protocol") != table["protocol"]:
        notes.append(f"the paper's numbers follow protocol {table['protocol']}; this run used "
                     f"{table.get('run_protocol') or 'none'}")
    if table.get("missing"):
        notes.append(f"not scored in this run: {', '.join(table['missing'])}")
    if notes:
        lines += ["", "Note: " + "; ".join(notes) + "."]
    if table.get("renorm"):
        from vlr_plugins.eval.query_bank import renorm_sentence

        lines += ["", renorm_sentence(table["renorm"])]
    return "\n".join(lines) + "\n"


def plot_table(table: Mapping[str, Any], path: str | os.PathLike) -> None:
    """One bar per column (every model's row side by side), the table's title on top.
    Empty entries are left out. Written atomically; needs matplotlib."""
    from vlr_plugins.eval.report import _pyplot, _save_figure

    plt = _pyplot()
    picked = table["rows"]
    labels = [c.get("short") or c["label"] for c in table["columns"]]
    fig, ax = plt.subplots(figsize=(max(4.0, 0.7 * len(labels) + 2), 3.8))
    width = 0.8 / max(1, len(picked))
    for j, row in enumerate(picked):
        xs = [i + (j - (len(picked) - 1) / 2) * width for i, v in enumerate(row["values"]) if v is not None]
        ax.bar(xs, [v for v in row["values"] if v is not None], width, label=row["model"])
    ax.set_xticks(range(len(labels)), labels, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("%")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(table["title"], fontsize=9)
    fig.tight_layout()
    _save_figure(fig, path)
