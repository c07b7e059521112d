"""Retrieval evaluation: exact recall in bounded memory, text encoding at a budget, and the
papers' protocols (truncation sweep, ReBias, short-vs-long Pareto summary)."""

from vlr_plugins.eval.benchmarks import BenchmarkSpec, load_benchmark_specs, read_benchmark
from vlr_plugins.eval.encode import encode_texts
from vlr_plugins.eval.evaluate import evaluate_benchmarks, evaluate_retrieval_set, evaluate_splits
from vlr_plugins.eval.protocols import list_protocols, token_budgets
from vlr_plugins.eval.retrieval import retrieval_recall
from vlr_plugins.eval.pareto import pareto_frontier, pareto_summary, plot_pareto
from vlr_plugins.eval.retrieval_bias import rebias
from vlr_plugins.eval.truncation import TRUNCATION_BUDGETS, plot_truncation, truncation_sweep

__all__ = ["BenchmarkSpec", "encode_texts", "evaluate_benchmarks", "evaluate_retrieval_set", "evaluate_splits",
           "load_benchmark_specs", "read_benchmark", "list_protocols", "token_budgets", "retrieval_recall",
           "TRUNCATION_BUDGETS", "pareto_frontier", "pareto_summary", "plot_pareto", "plot_truncation",
           "rebias", "truncation_sweep"]
