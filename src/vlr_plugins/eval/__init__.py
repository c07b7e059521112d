"""Retrieval evaluation: exact recall in bounded memory, text encoding at a budget, the text
models ``vlr eval`` scores, and the papers' protocols (truncation sweep, ReBias, short-vs-long
Pareto summary, frames per video benchmark) and result tables."""

from vlr_plugins.eval.benchmarks import BenchmarkSpec, load_benchmark_specs, read_benchmark
from vlr_plugins.eval.encode import encode_texts
from vlr_plugins.eval.hard_negatives import MinedNegatives, mine_hard_negatives
from vlr_plugins.eval.evaluate import evaluate_benchmarks, evaluate_retrieval_set, evaluate_splits
from vlr_plugins.eval.models import TextModel, encode_with_model, match_reranker
from vlr_plugins.eval.pareto import pareto_frontier, pareto_summary, plot_pareto
from vlr_plugins.eval.protocols import (
    BenchmarkProtocol,
    check_store_sampling,
    list_protocols,
    protocol_entries,
    token_budgets,
)
from vlr_plugins.eval.best_rank_metrics import rank_metrics
from vlr_plugins.eval.graded_metrics import graded_rank_metrics
from vlr_plugins.eval.metric_names import RANK_METRICS, parse_rank_metric
from vlr_plugins.eval.renorm import DualSoftmax, QueryBankNorm
from vlr_plugins.eval.rerank import rerank_pairs
from vlr_plugins.eval.retrieval import retrieval_recall
from vlr_plugins.eval.retrieval_bias import rebias
from vlr_plugins.eval.tables import fill_table, list_tables, plot_table, table_markdown
from vlr_plugins.eval.truncation import TRUNCATION_BUDGETS, plot_truncation, truncation_sweep

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
