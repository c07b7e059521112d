"""Retrieval evaluation: exact recall in bounded memory, text encoding at a budget, the text
models ``vlr eval`` scores, and the papers' protocols (truncation sweep, ReBias, short-vs-long
Pareto summary, frames per video benchmark) and result tables.

Names are resolved on first use, so ``import vlr_plugins.eval`` imports no torch."""

from __future__ import annotations

from vlr_plugins._lazy import lazy_exports

__all__ = [
    "RANK_METRICS",
    "TRUNCATION_BUDGETS",
    "BenchmarkProtocol",
    "BenchmarkSpec",
    "DualSoftmax",
    "MinedNegatives",
    "QueryBankNorm",
    "TextModel",
    "check_store_sampling",
    "encode_texts",
    "encode_with_model",
    "evaluate_benchmarks",
    "evaluate_retrieval_set",
    "evaluate_splits",
    "fill_table",
    "graded_rank_metrics",
    "list_protocols",
    "list_tables",
    "load_benchmark_specs",
    "match_reranker",
    "mine_hard_negatives",
    "pareto_frontier",
    "pareto_summary",
    "parse_rank_metric",
    "plot_pareto",
    "plot_table",
    "plot_truncation",
    "protocol_entries",
    "rank_metrics",
    "read_benchmark",
    "rebias",
    "rerank_pairs",
    "retrieval_recall",
    "table_markdown",
    "token_budgets",
    "truncation_sweep",
]

_LAZY = {name: f"vlr_plugins.eval.{module}" for module, names in {
    "benchmarks": ("BenchmarkSpec", "load_benchmark_specs", "read_benchmark"),
    "encode": ("encode_texts",),
    "hard_negatives": ("MinedNegatives", "mine_hard_negatives"),
    "evaluate": ("evaluate_benchmarks", "evaluate_retrieval_set", "evaluate_splits"),
    "models": ("TextModel", "encode_with_model", "match_reranker"),
    "pareto": ("pareto_frontier", "pareto_summary", "plot_pareto"),
    "protocols": ("BenchmarkProtocol", "check_store_sampling", "list_protocols", "protocol_entries",
                  "token_budgets"),
    "best_rank_metrics": ("rank_metrics",),
    "graded_metrics": ("graded_rank_metrics",),
    "metric_names": ("RANK_METRICS", "parse_rank_metric"),
    "renorm": ("DualSoftmax", "QueryBankNorm"),
    "rerank": ("rerank_pairs",),
    "retrieval": ("retrieval_recall",),
    "retrieval_bias": ("rebias",),
    "tables": ("fill_table", "list_tables", "plot_table", "table_markdown"),
    "truncation": ("TRUNCATION_BUDGETS", "plot_truncation", "truncation_sweep"),
}.items() for name in names}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
