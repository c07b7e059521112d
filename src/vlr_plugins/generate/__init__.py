"""Asking language models: one chat client for every OpenAI-compatible endpoint, shared by
the LLM-judged metrics (CapST), and the synthetic-supervision pipelines built on it
(``paragraph``, ``mvc``: :func:`load_pipeline`, :func:`generate_corpus`; docs/generate.md).

``import vlr_plugins.generate`` needs no extra package; building a client needs ``openai``
(``pip install 'vlr-plugins[generate]'``).
"""

from vlr_plugins.generate.audit import corpus_audit, format_audit, mvc_audit, paragraph_audit
from vlr_plugins.generate.backends.openai_chat import OpenAIChatClient
from vlr_plugins.generate.cache import ChatCache, cache_key
from vlr_plugins.generate.chat import ChatRequest, ChatResult, ChatSettings, EndpointError
from vlr_plugins.generate.json_answer import MalformedAnswer, parse_json_answer, reask_messages
from vlr_plugins.generate.parsing import parse_list_answer, parse_score_answer, parse_text_answer, strip_thinking
from vlr_plugins.generate.pipeline import Pipeline, list_pipelines, load_pipeline
from vlr_plugins.generate.retry import RetryPolicy, retry_after_seconds, retryable_status
from vlr_plugins.generate.runner import CorpusRun, generate_corpus
from vlr_plugins.generate.summary import RunSummary

__all__ = ["OpenAIChatClient", "ChatCache", "cache_key", "ChatRequest", "ChatResult", "ChatSettings",
           "EndpointError", "MalformedAnswer", "parse_json_answer", "reask_messages", "RetryPolicy",
           "retry_after_seconds", "retryable_status", "RunSummary", "parse_list_answer", "parse_score_answer",
           "parse_text_answer", "strip_thinking", "Pipeline", "list_pipelines", "load_pipeline", "CorpusRun",
           "generate_corpus", "corpus_audit", "format_audit", "mvc_audit", "paragraph_audit"]
