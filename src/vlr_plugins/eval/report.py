"""Results a person reads: Markdown tables and plots of recall per configuration."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from vlr_plugins._io import atomic_open

__all__ = ["recall_table_markdown", "plot_recall_bars"]

Results = Mapping[str, Mapping[str, Mapping[str, float]]]  # config -> split -> metric -> value

_LABEL = {"i2t_r1": "I2T R@1", "i2t_r5": "I2T R@5", "i2t_r10": "I2T R@10",
          "t2i_r1": "T2I R@1", "t2i_r5": "T2I R@5", "t2i_r10": "T2I R@10", "r_mean": "R mean"}


def recall_table_markdown(results: Results, splits: Sequence[str],
                          metrics: Sequence[str] = ("i2t_r1", "i2t_r5", "t2i_r1", "t2i_r5")) -> str:
    """One row per configuration, one column per (split, metric); percentages, 1 decimal."""
    head = ["config"] + [f"{s} {_LABEL.get(m, m)}" for s in splits for m in metrics]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cfg, per_split in results.items():
        cells = [cfg] + [f"{per_split[s][m]:.1f}" for s in splits for m in metrics]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_recall_bars(results: Results, splits: Sequence[str], path: str | os.PathLike,
                     metrics: Sequence[str] = ("i2t_r1", "t2i_r1"), title: str = "") -> None:
    """Grouped bars: one panel per split, configurations on the x axis, one bar per metric."""
    plt = _pyplot()
    configs = list(results)
    fig, axes = plt.subplots(1, len(splits), figsize=(4.2 * len(splits), 3.6), sharey=True, squeeze=False)
    width = 0.8 / len(metrics)
    for ax, split in zip(axes[0], splits):
        for j, m in enumerate(metrics):
            xs = [i + (j - (len(metrics) - 1) / 2) * width for i in range(len(configs))]
            ax.bar(xs, [results[c][split][m] for c in configs], width, label=_LABEL.get(m, m))
        ax.set_xticks(range(len(configs)), configs, rotation=30, ha="right")
        ax.set_title(split)
        ax.set_ylabel("recall (%)")
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
