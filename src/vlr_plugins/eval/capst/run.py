"""CapST from files to report: what ``vlr capst`` runs."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vlr_plugins.chat.openai_chat import OpenAIChatClient
from vlr_plugins.chat.request import ChatSettings
from vlr_plugins.errors import MissingFileError, UserError
from vlr_plugins.eval.capst.evaluate import evaluate_capst
from vlr_plugins.eval.capst.inputs import read_captions_jsonl, read_carebench_references
from vlr_plugins.eval.capst.report import write_capst_report
from vlr_plugins.eval.capst.unified import _retrieval_metrics, unified_score

__all__ = ["failure_summary", "run_capst"]

log = logging.getLogger(__name__)


def run_capst(captions: str | os.PathLike[str], annotations: str | os.PathLike[str],
              out_dir: str | os.PathLike[str], settings: ChatSettings, *, label: str | None = None,
              category_field: str = "category", split_references: bool = False,
              allow_missing: bool = False, cache: str | os.PathLike[str] | None = None,
              api_key: str | None = None, progress: bool = True,
              retrieval: Mapping[str, Any] | str | os.PathLike[str] | None = None,
              retrieval_benchmark: str | None = None) -> dict[str, Any]:
    """Score a captions JSONL against CaReBench's ``metadata.json`` with the judge that
    ``settings`` names, and write the report into ``out_dir``.

    Answers are cached in ``cache`` (default ``out_dir/llm-cache.sqlite``): a rerun after
    an interruption, or with another report, makes only the calls it lacks; pointing two
    models' runs at one cache file shares the reference extractions. ``label`` defaults
    to the captions file's stem. With ``retrieval`` (the same model's ``vlr eval``
    ``results.json``, or its dict), CaRe's unified score is added
    (:func:`~vlr_plugins.eval.capst.unified_score`; ``retrieval_benchmark`` picks the
    CaReBench general entry when the name is not the default). Returns the CapST result
    with ``"label"``, ``"judge"`` (the settings, not the key), ``"captions"``,
    ``"annotations"``, ``"unified"`` (or ``None``) and ``"files"``.

    Videos whose requests failed are listed under ``"failed"`` (and in the report); when
    every video failed, nothing is scored and nothing is written: a
    :class:`~vlr_plugins.errors.UserError` says how many and the first error (the cache
    file is there only if some answer was received).

    Example::

        >>> settings = ChatSettings(model="deepseek-chat", base_url="https://api.deepseek.com/v1",
        ...                         concurrency=32)
        >>> run_capst("care7b.jsonl", "CaReBench/json/metadata.json", "capst-care7b",
        ...           settings)["scores"]["overall"]  # doctest: +SKIP
    """
    label = label or Path(captions).stem
    metrics = None
    if retrieval is not None:  # checked before the judge is paid
        if not isinstance(retrieval, Mapping):
            if not os.path.isfile(retrieval):
                raise MissingFileError(f"retrieval results {os.fspath(retrieval)}: no such file")
            with open(retrieval, encoding="utf-8") as f:
                retrieval = json.load(f)
        metrics = _retrieval_metrics(retrieval, retrieval_benchmark)
    predicted = read_captions_jsonl(captions)
    references = read_carebench_references(annotations, category_field=category_field)
    cache_path = cache if cache is not None else Path(out_dir) / "llm-cache.sqlite"
    with OpenAIChatClient(settings, cache=cache_path, api_key=api_key, progress=progress) as client:
        result = evaluate_capst(predicted, references, client, split_references=split_references,
                                allow_missing=allow_missing)
        log.info("CapST judge: %s", client.summary)
    if result["failed"] and not result["scored"]:
        kept = f"; the answers received are kept in {cache_path}" if Path(cache_path).exists() else ""
        raise UserError(f"{failure_summary(result)}; no report was written{kept}")
    result = {"label": label, "judge": settings.describe(), "captions": os.fspath(captions),
              "annotations": os.fspath(annotations), **result}
    result["unified"] = None if metrics is None else unified_score(metrics, result)
    result["files"] = write_capst_report(result, out_dir, label=label)
    return result


def failure_summary(result: Mapping[str, Any]) -> str:
    """``"2 of 3 videos failed and were not scored (the first: video 'v1', judging events
    for recall: HTTP 500 ...)"``, or ``"all 3 videos failed ..."``, for a result with failures."""
    failed = result["failed"]
    first = failed[0]
    asked = result["scored"] + len(failed)
    if result["scored"]:
        count = f"{len(failed)} of {asked} videos failed and were not scored"
    else:
        count = f"all {asked} videos failed, none was scored" if asked > 1 else "1 video failed, none was scored"
    return f"{count} (the first: video {first['id']!r}, {first['stage']}: {first['error']})"
