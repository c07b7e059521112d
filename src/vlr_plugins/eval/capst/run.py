"""CapST from files to report: what ``vlr capst`` runs."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from vlr_plugins.eval.capst.evaluate import evaluate_capst
from vlr_plugins.eval.capst.inputs import read_captions_jsonl, read_carebench_references
from vlr_plugins.eval.capst.report import write_capst_report
from vlr_plugins.generate.backends.openai_chat import OpenAIChatClient
from vlr_plugins.generate.chat import ChatSettings

__all__ = ["run_capst"]

log = logging.getLogger(__name__)


def run_capst(captions: str | os.PathLike[str], annotations: str | os.PathLike[str],
              out_dir: str | os.PathLike[str], settings: ChatSettings, *, label: str | None = None,
              category_field: str = "category", split_references: bool = False,
              allow_missing: bool = False, cache: str | os.PathLike[str] | None = None,
              api_key: str | None = None, progress: bool = True) -> dict[str, Any]:
    """Score a captions JSONL against CaReBench's ``metadata.json`` with the judge that
    ``settings`` names, and write the report into ``out_dir``.

    Answers are cached in ``cache`` (default ``out_dir/llm-cache.sqlite``): a rerun after
    an interruption, or with another report, makes only the calls it lacks; pointing two
    models' runs at one cache file shares the reference extractions. ``label`` defaults
    to the captions file's stem. Returns the CapST result with ``"label"``, ``"judge"``
    (the settings, not the key), ``"captions"``, ``"annotations"`` and ``"files"``.

    Example::

        >>> settings = ChatSettings(model="deepseek-chat", base_url="https://api.deepseek.com/v1",
        ...                         concurrency=32)
        >>> run_capst("care7b.jsonl", "CaReBench/json/metadata.json", "capst-care7b",
        ...           settings)["scores"]["overall"]  # doctest: +SKIP
    """
    label = label or Path(captions).stem
    predicted = read_captions_jsonl(captions)
    references = read_carebench_references(annotations, category_field=category_field)
    cache_path = cache if cache is not None else Path(out_dir) / "llm-cache.sqlite"
    with OpenAIChatClient(settings, cache=cache_path, api_key=api_key, progress=progress) as client:
        result = evaluate_capst(predicted, references, client, split_references=split_references,
                                allow_missing=allow_missing)
        log.info("CapST judge: %s", client.summary)
    result = {"label": label, "judge": settings.describe(), "captions": os.fspath(captions),
              "annotations": os.fspath(annotations), **result}
    result["files"] = write_capst_report(result, out_dir, label=label)
    return result
