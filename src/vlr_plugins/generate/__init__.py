"""The synthetic-supervision pipelines (``paragraph``, ``mvc``: :func:`load_pipeline`,
:func:`generate_corpus`; docs/generate.md), built on the shared chat client
(:mod:`vlr_plugins.chat`).

``import vlr_plugins.generate`` needs no extra package (its names are resolved on first use); building a client needs ``openai``
(``pip install 'vlr-plugins[generate]'``).
"""

from __future__ import annotations

from vlr_plugins._lazy import lazy_exports

__all__ = ["parse_list_answer", "parse_score_answer", "parse_text_answer", "strip_thinking", "Pipeline",
           "list_pipelines", "load_pipeline", "CorpusRun", "generate_corpus", "corpus_audit", "format_audit",
           "mvc_audit", "paragraph_audit"]

_LAZY = {name: f"vlr_plugins.generate.{module}" for module, names in {
    "audit": ("corpus_audit", "format_audit", "mvc_audit", "paragraph_audit"),
    "parsing": ("parse_list_answer", "parse_score_answer", "parse_text_answer", "strip_thinking"),
    "pipeline": ("Pipeline", "list_pipelines", "load_pipeline"),
    "runner": ("CorpusRun", "generate_corpus"),
}.items() for name in names}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
