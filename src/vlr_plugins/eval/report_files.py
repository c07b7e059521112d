"""The files of an evaluation report (what ``vlr eval`` writes): JSON, Markdown and plots.

A module of its own rather than part of :mod:`vlr_plugins.eval.report`, because it draws
the truncation curves of :mod:`vlr_plugins.eval.truncation`, which itself draws with the
plot helpers of :mod:`~vlr_plugins.eval.report`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from vlr_plugins._io import atomic_write_json, atomic_write_text
from vlr_plugins.eval.metric_names import DEFAULT_METRICS, DIRECTIONS, lower_is_better, metric_label, result_key
from vlr_plugins.eval.report import plot_recall_bars, recall_table_markdown
from vlr_plugins.eval.tables import fill_table, list_tables, plot_table, table_markdown
from vlr_plugins.eval.truncation import plot_truncation

__all__ = ["write_eval_report"]

_TABLE_METRICS = ("i2t_r1", "i2t_r5", "t2i_r1", "t2i_r5")  # without --metrics, as before it


def _units(metrics: Sequence[str]) -> str:
    """The sentence of ``results.md`` that says what the numbers are."""
    recall = [m for m in metrics if m.startswith("r@")]
    ranks = [metric_label(m) for m in metrics if lower_is_better(m)]
    scores = [metric_label(m) for m in metrics if not m.startswith("r@") and not lower_is_better(m)]
    parts = ["Recall in %"] if recall else []
    if ranks:
        parts.append(f"{', '.join(ranks)}: 1-based rank of the best positive (lower is better)")
    if scores:
        parts.append(f"{', '.join(scores)}: in [0, 1]")
    return "; ".join(parts) + "."


def _settings(result: Mapping[str, Any]) -> str:
    """The lines of ``results.md`` that say how each benchmark was encoded."""
    own = "the model's own"
    budgets = ", ".join(f"{n} {own if b is None else b}" for n, b in result["budgets"].items())
    lines = [f"Token budgets: {budgets}."]
    if result.get("sampling"):
        lines.append("Frames: " + ", ".join(f"{n} {s['frames']} ({s['sampler']})"
                                           for n, s in result["sampling"].items()) + ".")
    if result.get("text_views"):
        lines.append("Text views: " + ", ".join(f"{n} {v}" for n, v in result["text_views"].items()) + ".")
    if result.get("rerank_k"):
        lines.append(f"Re-ranked: the top {result['rerank_k']} candidates of each query by the matching head.")
    if result.get("renorm"):
        from vlr_plugins.eval.query_bank import renorm_sentence

        lines.append(renorm_sentence(result["renorm"]))
    return "\n".join(lines) + " "


def write_eval_report(
    result: Mapping[str, Any],
    out_dir: str | os.PathLike,
    *,
    model: str,
    label: str,
    protocol: str | None = None,
    tables: Sequence[str] = (),
    unified: Mapping[str, Any] | None = None,
    model_dtype: str | None = None,
    metrics: Sequence[str] | None = None,
    truncation_metric: str | None = None,
) -> dict[str, Any]:
    """Write the report of one model's evaluation into ``out_dir``; each file atomically.

    ``result``: what :func:`~vlr_plugins.eval.evaluate_benchmarks` returns
    (``{"recall": {bench: metrics}, "budgets": {bench: n}, "truncation": {bench: curve}}``).
    ``tables``: names of :func:`~vlr_plugins.eval.tables.list_tables` to fill in.
    ``unified``: CaRe's unified score (:func:`~vlr_plugins.eval.capst.unified_score` with
    the CapST results it was joined with, under ``"capst"``), when given. ``model_dtype``: the
    dtype an MLLM computed in (``"bfloat16"``; :mod:`vlr_plugins.mllm.model_dtype`), recorded
    beside ``model`` when given, so that runs at different dtypes are told apart.
    ``metrics``: the names the run computed (``vlr eval --metrics``; default
    ``result["metrics"]``, else R@1/5/10): the recall table has a column per metric and
    direction (without them, I2T/T2I R@1 and R@5 as ever); ``recall.png`` and the truncation
    curves plot ``truncation_metric`` (default R@1, else the first metric).

    - ``results.json``: ``{"model", "model_dtype" (when given), "label", "protocol", "metrics", **result,
      "tables": {name: table}, "unified": unified}`` (:func:`~vlr_plugins.eval.tables.fill_table`);
    With ``result["renorm"]`` (``--renorm``) ``results.md`` says how the scores were re-normalised,
    above the recall table and under each paper's table (:func:`~vlr_plugins.eval.query_bank.renorm_sentence`).

    - ``results.md``: the token budgets (and frames, text views, the renorm), a recall table (one row,
      ``label``), then each of ``tables`` in its paper's layout, then the unified score;
    - ``recall.png``, per benchmark with a truncation sweep ``truncation-<benchmark>.png``
      (``/`` in a name becomes ``-``), and per table ``table-<name>.png``; only with
      matplotlib (the ``[plot]`` extra).

    Returns ``{"json": path, "markdown": path, "table": the Markdown recall table and
    tables, "plots": the plot paths, or None when matplotlib is not installed}``.

    Example::

        >>> result = evaluate_benchmarks(encoder, tokenizer, specs)  # doctest: +SKIP
        >>> write_eval_report(result, "vlr-eval", model="c5.pth", label="c5")["table"]  # doctest: +SKIP
    """
    out = os.fspath(out_dir)
    json_path, md_path = os.path.join(out, "results.json"), os.path.join(out, "results.md")
    chosen = metrics if metrics is not None else result.get("metrics")
    names_chosen = list(chosen) if chosen else list(DEFAULT_METRICS)
    plotted = truncation_metric or ("r@1" if "r@1" in names_chosen else names_chosen[0])
    plot_keys = tuple(result_key(plotted, d) for d in DIRECTIONS)
    columns = tuple(result_key(m, d) for d in DIRECTIONS for m in names_chosen) if chosen else _TABLE_METRICS
    filled = {name: fill_table(list_tables()[name], result["recall"], label, protocol=protocol,
                                renorm=result.get("renorm")) for name in tables}
    atomic_write_json(json_path, {"model": str(model), **({"model_dtype": model_dtype} if model_dtype else {}),
                                  "label": label, "protocol": protocol, "metrics": names_chosen, **result,
                                  **({"tables": filled} if filled else {}),
                                  **({"unified": dict(unified)} if unified is not None else {})})
    names = list(result["recall"])
    table = recall_table_markdown({label: result["recall"]}, names, columns, video=set(result.get("media") or ()))
    table += "".join("\n" + table_markdown(t) for t in filled.values())
    if unified is not None:
        table += ("\n**CaReBench, Table 5** (unified score: the mean of Avg R@1, general retrieval, and "
                  "Avg F1, CapST action and object)\n\n| Model | Avg R@1 | Avg F1 | Unified |\n|---|---|---|---|\n"
                  f"| {label} | {unified['avg_r1']:.1f} | {unified['avg_f1']:.1f} | {unified['unified']:.1f} |\n")
    atomic_write_text(md_path, f"# Retrieval: {label}\n\n{_settings(result)}{_units(names_chosen)}\n\n{table}")
    plots: list[str] | None = []
    try:
        path = os.path.join(out, "recall.png")
        plot_recall_bars({label: result["recall"]}, names, path, metrics=plot_keys, title=label)
        plots.append(path)
        for name, curve in (result.get("truncation") or {}).items():
            path = os.path.join(out, f"truncation-{name.replace('/', '-')}.png")
            plot_truncation({label: curve}, path, metrics=plot_keys)
            plots.append(path)
        for name, filled_table in filled.items():
            path = os.path.join(out, f"table-{name}.png")
            plot_table(filled_table, path)
            plots.append(path)
    except ImportError:  # matplotlib is imported when the first plot is drawn
        plots = None
    return {"json": json_path, "markdown": md_path, "table": table, "plots": plots}
