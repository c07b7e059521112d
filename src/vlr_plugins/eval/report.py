"""Results a person reads: Markdown tables and plots of recall per configuration."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence

from vlr_plugins._io import atomic_open

__all__ = ["key_label", "recall_table_markdown", "plot_recall_bars"]

Results = Mapping[str, Mapping[str, Mapping[str, float]]]  # config -> split -> metric -> value

_OTHER = {"r_mean": "R mean", "i2t_mean": "I2T R mean", "t2i_mean": "T2I R mean"}


def _parsed(key: str) -> tuple[str, str] | None:
    from vlr_plugins.eval.metric_names import metric_of_key

    try:
        return metric_of_key(key)
    except ValueError:
        return None


#: the directions' names where the items are videos
_VIDEO_DIRECTIONS = {"i2t": "V2T", "t2i": "T2V"}


def key_label(key: str, video: bool = False) -> str:
    """The header of a result key: ``I2T R@1``, ``T2I MdR↓``, ``I2T MRR@10``, ``R mean``; with
    ``video`` (the items are videos) ``V2T R@1``, ``T2V MdR↓``; a key that is no metric is shown
    as it is."""
    from vlr_plugins.eval.metric_names import metric_label

    parsed = _parsed(key)
    if not parsed:
        label = _OTHER.get(key, key)
        return label.replace("I2T", "V2T").replace("T2I", "T2V") if video else label
    direction = _VIDEO_DIRECTIONS.get(parsed[0], parsed[0].upper()) if video else parsed[0].upper()
    return f"{direction} {metric_label(parsed[1])}"


def _digits(key: str) -> int:
    from vlr_plugins.eval.metric_names import metric_digits

    parsed = _parsed(key)
    return metric_digits(parsed[1]) if parsed else 1


def recall_table_markdown(results: Results, splits: Sequence[str],
                          metrics: Sequence[str] = ("i2t_r1", "i2t_r5", "t2i_r1", "t2i_r5"),
                          video: Collection[str] = ()) -> str:
    """One row per configuration, one column per (split, metric); recall in percent and ranks
    (MdR, MnR: lower is better, marked ``↓``) with 1 decimal, scores in [0, 1] (MRR@k, ...) with 3.
    The splits in ``video`` (their items are videos) are headed T2V / V2T."""
    head = ["config"] + [f"{s} {key_label(m, video=s in video)}" for s in splits for m in metrics]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cfg, per_split in results.items():
        cells = [cfg] + [f"{per_split[s][m]:.{_digits(m)}f}" for s in splits for m in metrics]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_recall_bars(results: Results, splits: Sequence[str], path: str | os.PathLike,
                     metrics: Sequence[str] = ("i2t_r1", "t2i_r1"), title: str = "") -> None:
    """Grouped bars: one panel per split, configurations on the x axis, one bar per metric
    (result keys; the axis says their unit: recall (%), a rank, a score)."""
    from vlr_plugins.eval.metric_names import metric_unit

    units = {metric_unit(p[1]) if p else "recall (%)" for p in map(_parsed, metrics)}
    ylabel = units.pop() if len(units) == 1 else "value"
    plt = _pyplot()
    configs = list(results)
    fig, axes = plt.subplots(1, len(splits), figsize=(4.2 * len(splits), 3.6), sharey=True, squeeze=False)
    width = 0.8 / len(metrics)
    for ax, split in zip(axes[0], splits):
        for j, m in enumerate(metrics):
            xs = [i + (j - (len(metrics) - 1) / 2) * width for i in range(len(configs))]
            ax.bar(xs, [results[c][split][m] for c in configs], width, label=key_label(m))
        ax.set_xticks(range(len(configs)), configs, rotation=30, ha="right")
        ax.set_title(split)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    _save_figure(fig, path)


def _pyplot():
    """``matplotlib.pyplot`` on the Agg backend, imported only when a plot is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save_figure(fig, path: str | os.PathLike) -> None:
    """Write ``fig`` atomically in the format its suffix names (PNG without one), then close it."""
    import matplotlib.pyplot as plt

    suffix = os.path.splitext(str(path))[1].lstrip(".") or "png"
    try:
        with atomic_open(path, "wb") as f:
            fig.savefig(f, format=suffix, dpi=120)
    finally:
        plt.close(fig)
