"""Retrieval evaluation: exact recall in bounded memory, text encoding at a budget."""

from vlr_plugins.eval.encode import encode_texts
from vlr_plugins.eval.evaluate import evaluate_splits
from vlr_plugins.eval.retrieval import ranks_of_best_positive, retrieval_recall

__all__ = ["encode_texts", "evaluate_splits", "ranks_of_best_positive", "retrieval_recall"]
