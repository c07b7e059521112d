"""CapST results a person reads: CaReBench Table 2 as Markdown, a bar plot, and the files."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from vlr_plugins._io import atomic_write_json, atomic_write_text
from vlr_plugins.eval.capst.scoring import SCORE_KINDS
from vlr_plugins.eval.report import _pyplot, _save_figure

__all__ = ["capst_table_markdown", "plot_capst_bars", "write_capst_report"]


def _title(group: str) -> str:
    return "Overall" if group == "overall" else group.title()


def _cell(scores: Mapping[str, Any] | None) -> str:
    if scores is None or scores["n"] == 0 or math.isnan(scores["f1"]):
        return "-"
    return f"{scores['f1']:.1f}/{scores['recall']:.1f}/{scores['precision']:.1f}"


def capst_table_markdown(results: Mapping[str, Mapping[str, Any]]) -> str:
    """CaReBench Table 2's layout: one row per model (``{label: CapST result or its
    "scores"}``), for each category then Overall an Action and an Object cell reading
    ``F1/Recall/Precision`` in percent, 1 decimal (``-`` for a group without a scored video).

    The groups are the first model's (a model without one of them shows ``-`` there).
    """
    tables = {label: r.get("scores", r) for label, r in results.items()}
    groups = list(next(iter(tables.values())))
    head = ["Model"] + [f"{_title(g)} {col.title()}" for g in groups for col in SCORE_KINDS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, table in tables.items():
        cells = [_cell(table.get(g, {}).get(col)) for g in groups for col in SCORE_KINDS]
        lines.append("| " + " | ".join([label, *cells]) + " |")
    return "\n".join(lines) + "\n"


def plot_capst_bars(result: Mapping[str, Any], path: str | os.PathLike[str], title: str = "") -> None:
    """Action and object F1 per category and overall, as grouped bars; needs matplotlib."""
    plt = _pyplot()
    table = result.get("scores", result)
    groups = list(table)
    fig, ax = plt.subplots(figsize=(1.6 * len(groups) + 2, 3.8))
    width = 0.38
    for j, col in enumerate(SCORE_KINDS):
        xs = [i + (j - 0.5) * width for i in range(len(groups))]
        values = [table[g][col]["f1"] for g in groups]
        bars = ax.bar(xs, [0.0 if math.isnan(v) else v for v in values], width, label=f"{col} F1")
        ax.bar_label(bars, labels=["-" if math.isnan(v) else f"{v:.1f}" for v in values], fontsize=7)
    ax.set_xticks(range(len(groups)), [_title(g) for g in groups], rotation=20, ha="right")
    ax.set_ylabel("CapST F1 (%)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    _save_figure(fig, path)


def _summary_lines(result: Mapping[str, Any]) -> list[str]:
    lines = [f"Scored {result['scored']} of {result['videos']} videos."]
    if result["missing"]:
        lines.append(f"{len(result['missing'])} video(s) had no caption and were not scored.")
    if result["failed"]:
        lines.append(f"{len(result['failed'])} video(s) failed and were not scored:")
        lines += [f"- `{f['id']}`: {f['stage']}: {f['error']}" for f in result["failed"]]
    given = result["reference_elements_given"]
    lines.append(f"Reference elements from the annotation file: events for {given['events']}, "
                 f"objects for {given['objects']} videos (the rest extracted"
                 f"{' from the temporal / spatial captions' if result['split_references'] else ''}).")
    unified = result.get("unified")
    if unified:
        lines.append(f"Unified score (CaRe, CaReBench Table 5): {unified['unified']:.1f} = mean of "
                     f"Avg R@1 {unified['avg_r1']:.1f} and Avg F1 {unified['avg_f1']:.1f}.")
    req = result["requests"]
    lines.append(f"Judge requests: {req['requests']} ({req['calls']} calls, "
                 f"{req['cache_hits']} cache hits, {req['retries']} retries, "
                 f"{req['malformed']} malformed answers, {req['failures']} failures).")
    return lines


def write_capst_report(result: Mapping[str, Any], out_dir: str | os.PathLike[str], *,
                       label: str) -> dict[str, Any]:
    """Write ``capst.json`` (the whole result, per-video details included), ``capst.md``
    (Table 2's row and how the run went) and ``capst.png`` (only with matplotlib, the
    ``[plot]`` extra) into ``out_dir``, each atomically.

    Returns ``{"json", "markdown", "table", "plot": path or None}``.
    """
    out = os.fspath(out_dir)
    json_path, md_path = os.path.join(out, "capst.json"), os.path.join(out, "capst.md")
    atomic_write_json(json_path, {"label": label, **result})
    table = capst_table_markdown({label: result})
    judge = result.get("judge") or {}
    judge_line = ""
    if judge.get("model"):
        where = judge.get("base_url") or "the default OpenAI URL"
        judge_line = f"Judge: `{judge['model']}` at {where}.\n\n"
    summary = "\n".join(_summary_lines(result))
    atomic_write_text(md_path, f"# CapST: {label}\n\n{judge_line}F1/Recall/Precision in %, "
                               f"CaReBench Table 2's layout.\n\n{table}\n{summary}\n")
    plot: str | None = os.path.join(out, "capst.png")
    try:
        plot_capst_bars(result, plot, title=f"CapST: {label}")
    except ImportError:  # matplotlib is imported when the plot is drawn
        plot = None
    return {"json": json_path, "markdown": md_path, "table": table, "plot": plot}
