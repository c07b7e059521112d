"""Recall as a function of the text token budget (the paragraph-supervision paper, sec. 4.3
and Figure 2): does an encoder use tokens past the first few dozen?"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

import torch

from vlr_plugins.data.retrieval_set import RetrievalSet
from vlr_plugins.eval.encode import encode_texts
from vlr_plugins.eval.renorm import Renorm
from vlr_plugins.eval.retrieval import retrieval_recall

__all__ = ["TRUNCATION_BUDGETS", "plot_truncation", "truncation_sweep"]

#: The budgets of the paper's truncation analysis, special tokens included.
TRUNCATION_BUDGETS: tuple[int, ...] = (20, 40, 60, 80, 100, 128)


def truncation_sweep(
    encoder: torch.nn.Module,
    tokenizer,
    item_emb: torch.Tensor,
    retrieval_set: RetrievalSet,
    budgets: Sequence[int] = TRUNCATION_BUDGETS,
    *,
    ks: Sequence[int] = (1, 5, 10),
    rank_metrics: Sequence[str] = (),
    renorm: Renorm | Callable[[int], Renorm] | None = None,
    batch_size: int = 256,
    device: str | torch.device | None = None,
    progress: bool = True,
) -> dict[int, dict]:
    """Recall of ``retrieval_set`` with its texts cut to each token budget in turn.

    item_emb: (N, D), row ``i`` the embedding of ``retrieval_set.item_ids[i]``. At each
    budget the texts are encoded by :func:`~vlr_plugins.eval.encode_texts` (cut to the
    budget, ``[CLS]``/``[SEP]`` included, as in training) and scored by
    :func:`~vlr_plugins.eval.retrieval_recall` (with ``rank_metrics``, such as ``("mdr",)``, those
    too; with ``renorm`` ranked by its re-normalised scores at every budget: a
    :class:`~vlr_plugins.eval.DualSoftmax` / :class:`~vlr_plugins.eval.QueryBankNorm`, or a
    callable budget -> one, for a text bank encoded at each budget as the test texts are);
    nothing else changes between budgets.
    Returns budget -> that recall dict, in the order of ``budgets``. Budgets past the
    longest text give the same result as each other.

    Example::

        curves = {"C4": truncation_sweep(enc, tok, items, docci)}
        plot_truncation(curves, "truncation_docci.png")
    """
    budgets = [int(b) for b in budgets]
    if not budgets:
        raise ValueError("truncation_sweep: no budgets")
    duplicates = sorted({b for b in budgets if budgets.count(b) > 1})
    if duplicates:
        raise ValueError(f"truncation_sweep: budgets repeat {duplicates}")
    # [CLS] and [SEP] alone take 2 tokens
    if min(budgets) < 3:
        raise ValueError(f"truncation_sweep: budgets must leave room for a word (>= 3), found {budgets}")
    max_positions = getattr(encoder, "max_positions", None)
    if max_positions is not None and max(budgets) > max_positions:
        raise ValueError(f"truncation_sweep: budget {max(budgets)} exceeds the encoder's "
                         f"{max_positions} positions")
    if item_emb.ndim != 2 or item_emb.shape[0] != len(retrieval_set):
        raise ValueError(f"truncation_sweep: expected item_emb ({len(retrieval_set)}, D), one row per "
                         f"item of {retrieval_set.name!r}, found {tuple(item_emb.shape)}")
    results: dict[int, dict] = {}
    for budget in budgets:
        text_emb = encode_texts(encoder, tokenizer, retrieval_set.texts, budget, batch_size=batch_size,
                                device=device, progress=progress,
                                desc=f"encode {retrieval_set.name} at {budget} tokens")
        ranked_by = renorm(budget) if callable(renorm) else renorm
        results[budget] = retrieval_recall(item_emb, text_emb, retrieval_set.text_owner, ks=ks,
                                           device=device, rank_metrics=tuple(rank_metrics), renorm=ranked_by)
    return results


def plot_truncation(
    curves: Mapping[str, Mapping[int, Mapping[str, float]]],
    path: str | os.PathLike,
    metrics: Sequence[str] = ("i2t_r1", "t2i_r1"),
    title: str = "",
) -> None:
    """Figure 2 of the paper: one panel per metric, recall against the token budget, one
    line per configuration. ``curves``: config -> :func:`truncation_sweep` result.
    ``metrics``: result keys, any the sweep computed (``("i2t_mdr", "t2i_mdr")``; a panel
    is titled ``I2T MdR↓``, its axis says the unit). Written atomically; needs matplotlib."""
    from vlr_plugins.eval.metric_names import metric_of_key, metric_unit
    from vlr_plugins.eval.report import _pyplot, _save_figure, key_label

    if not curves:
        raise ValueError("plot_truncation: no curves")
    for config, curve in curves.items():
        for budget, result in curve.items():
            lacking = [m for m in metrics if m not in result]
            if lacking:
                raise KeyError(f"plot_truncation: the curve of {config!r} at budget {budget} lacks {lacking}; "
                               f"found {sorted(result)}")
    units = {metric_unit(metric_of_key(m)[1]) for m in metrics}
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.6 * len(metrics), 3.8), sharey=len(units) == 1,
                             squeeze=False)
    # budgets may come back from JSON as strings
    budgets = sorted({int(b) for curve in curves.values() for b in curve})
    for ax, metric in zip(axes[0], metrics):
        for config, curve in curves.items():
            xs = sorted(curve, key=int)
            ax.plot([int(b) for b in xs], [curve[b][metric] for b in xs], marker="o", label=config)
        ax.set_xticks(budgets)
        ax.set_title(key_label(metric))
        ax.set_xlabel("text token budget")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(units.pop() if len(units) == 1 else "value")
    axes[0][-1].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    _save_figure(fig, path)
