"""CapST (CaReBench, Xu et al. 2025, sec. 3.4.2): detailed video captions scored by an LLM
judge on the events (action) and objects they get right, and CaRe's unified score.

Needs a chat endpoint (:mod:`vlr_plugins.chat`, the ``[generate]`` extra) to run; the
scoring, prompts and report need nothing beyond the core.
"""

from __future__ import annotations

from vlr_plugins._lazy import lazy_exports

__all__ = [
    "ELEMENT_KINDS",
    "NLI_LABELS",
    "SCORE_KINDS",
    "CapstReference",
    "capst_requests_per_video",
    "capst_table",
    "capst_table_markdown",
    "corpus_scores",
    "entailed_share",
    "evaluate_capst",
    "extraction_messages",
    "f1_score",
    "failure_summary",
    "judgement_messages",
    "parse_elements",
    "parse_judgement",
    "plot_capst_bars",
    "prompt_template",
    "read_captions_jsonl",
    "read_carebench_references",
    "run_capst",
    "unified_score",
    "load_capst_result",
    "write_capst_report",
]

_LAZY = {name: f"vlr_plugins.eval.capst.{module}" for module, names in {
    "answers": ("NLI_LABELS", "parse_elements", "parse_judgement"),
    "evaluate": ("capst_requests_per_video", "evaluate_capst"),
    "inputs": ("CapstReference", "read_captions_jsonl", "read_carebench_references"),
    "prompts": ("ELEMENT_KINDS", "extraction_messages", "judgement_messages", "prompt_template"),
    "report": ("capst_table_markdown", "plot_capst_bars", "write_capst_report"),
    "run": ("failure_summary", "run_capst"),
    "scoring": ("SCORE_KINDS", "capst_table", "corpus_scores", "entailed_share", "f1_score"),
    "unified": ("load_capst_result", "unified_score"),
}.items() for name in names}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
