"""The synthetic-supervision pipelines (``paragraph``, ``mvc``: :func:`load_pipeline`,
:func:`generate_corpus`; docs/generate.md), built on the shared chat client
(:mod:`vlr_plugins.chat`).

``import vlr_plugins.generate`` needs no extra package; building a client needs ``openai``
(``pip install 'vlr-plugins[generate]'``).
"""

from vlr_plugins.generate.audit import corpus_audit, format_audit, mvc_audit, paragraph_audit
from vlr_plugins.generate.parsing import parse_list_answer, parse_score_answer, parse_text_answer, strip_thinking
from vlr_plugins.generate.pipeline import Pipeline, list_pipelines, load_pipeline
from vlr_plugins.generate.runner import CorpusRun, generate_corpus

__all__ = ["parse_list_answer", "parse_score_answer", "parse_text_answer", "strip_thinking", "Pipeline",
           "list_pipelines", "load_pipeline", "CorpusRun", "generate_corpus", "corpus_audit", "format_audit",
           "mvc_audit", "paragraph_audit"]
