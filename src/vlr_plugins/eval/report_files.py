"""The files of an evaluation report (what ``vlr eval`` writes): JSON, Markdown and plots.

A module of its own rather than part of :mod:`vlr_plugins.eval.report`, because it draws
the truncation curves of :mod:`vlr_plugins.eval.truncation`, which itself draws with the
plot helpers of :mod:`~vlr_plugins.eval.report`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from vlr_plugins._io import atomic_write_json, atomic_write_text
from vlr_plugins.eval.report import plot_recall_bars, recall_table_markdown
from vlr_plugins.eval.truncation import plot_truncation

__all__ = ["write_eval_report"]

_TABLE_METRICS = ("i2t_r1", "i2t_r5", "t2i_r1", "t2i_r5")


def write_eval_report(
    result: Mapping[str, Any],
    out_dir: str | os.PathLike,
    *,
    model: str,
    label: str,
    protocol: str | None = None,
) -> dict[str, Any]:
    """Write the report of one model's evaluation into ``out_dir``; each file atomically.

    ``result``: what :func:`~vlr_plugins.eval.evaluate_benchmarks` returns
    (``{"recall": {bench: metrics}, "budgets": {bench: n}, "truncation": {bench: curve}}``).

    - ``results.json``: ``{"model", "label", "protocol", **result}``;
    - ``results.md``: the token budgets and a recall table (one row, ``label``);
    - ``recall.png`` and, per benchmark with a truncation sweep,
      ``truncation-<benchmark>.png`` (``/`` in a name becomes ``-``); only with matplotlib
      (the ``[plot]`` extra).

    Returns ``{"json": path, "markdown": path, "table": the Markdown table, "plots": the
    plot paths, or None when matplotlib is not installed}``.

    Example::

        >>> result = evaluate_benchmarks(encoder, tokenizer, specs)  # doctest: +SKIP
        >>> write_eval_report(result, "vlr-eval", model="c5.pth", label="c5")["table"]  # doctest: +SKIP
    """
    out = os.fspath(out_dir)
    json_path, md_path = os.path.join(out, "results.json"), os.path.join(out, "results.md")
    atomic_write_json(json_path, {"model": str(model), "label": label, "protocol": protocol, **result})
    names = list(result["recall"])
    table = recall_table_markdown({label: result["recall"]}, names, _TABLE_METRICS)
    budgets_line = ", ".join(f"{n} {b}" for n, b in result["budgets"].items())
    atomic_write_text(md_path, f"# Retrieval: {label}\n\nToken budgets: {budgets_line}. Recall in %.\n\n{table}")
    plots: list[str] | None = []
    try:
        path = os.path.join(out, "recall.png")
        plot_recall_bars({label: result["recall"]}, names, path, title=label)
        plots.append(path)
        for name, curve in (result.get("truncation") or {}).items():
            path = os.path.join(out, f"truncation-{name.replace('/', '-')}.png")
            plot_truncation({label: curve}, path)
            plots.append(path)
    except ImportError:  # matplotlib is imported when the first plot is drawn
        plots = None
    return {"json": json_path, "markdown": md_path, "table": table, "plots": plots}
