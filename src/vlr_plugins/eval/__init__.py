"""Retrieval evaluation: exact recall in bounded memory, text encoding at a budget."""

from vlr_plugins.eval.encode import encode_texts
from vlr_plugins.eval.evaluate import (
    BenchmarkSpec,
    evaluate_benchmarks,
    evaluate_retrieval_set,
    evaluate_splits,
    load_benchmark_specs,
)
from vlr_plugins.eval.protocols import protocols, token_budgets
from vlr_plugins.eval.retrieval import ranks_of_best_positive, retrieval_recall

__all__ = ["BenchmarkSpec", "encode_texts", "evaluate_benchmarks", "evaluate_retrieval_set", "evaluate_splits",
           "load_benchmark_specs", "protocols", "token_budgets", "ranks_of_best_positive", "retrieval_recall"]
