"""LAVIS integration: the paragraph-supervision recipe inside LAVIS' registry and runner.

Importing this module registers, into ``lavis.common.registry`` (guarded against double
registration):

- model ``blip_retrieval_textonly`` (``model.BlipRetrievalTextOnly``),
- dataset builders ``vlr_paragraph`` (training) and ``vlr_retrieval``, ``vlr_flickr30k``,
  ``vlr_coco_karpathy``, ``vlr_sharegpt4v``, ``vlr_docci`` (evaluation),
- task ``vlr_retrieval`` (streaming recall, optional ITM re-ranking),
- text processor ``vlr_text`` (no silent word cut).

LAVIS (``salesforce-lavis==1.0.2``) pins ``transformers<4.27`` and ``timm==0.4.12``, so it
lives in its own environment: see docs/lavis.md. ``vlr lavis-train`` / ``vlr lavis-eval``
import this module and run LAVIS' own runner.
"""

from __future__ import annotations

import warnings

try:
    # LAVIS' pinned fairscale 0.4.4 and timm 0.4.12 use torch APIs that current torch
    # deprecates, and say so at import: not the user's concern
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import lavis  # noqa: F401  (registers LAVIS' own models, builders, tasks, processors)
        import lavis.common.optims  # noqa: F401  (LR schedulers and runners register on import,
        import lavis.runners  # noqa: F401         as LAVIS' train.py does)
except ImportError as e:  # pragma: no cover - exercised in the main environment's test
    raise ImportError(
        "vlr_plugins.integrations.lavis needs salesforce-lavis 1.0.2 in its own environment "
        "(it pins transformers<4.27): pip install -c constraints-lavis.txt 'vlr-plugins[lavis]' "
        "-- see docs/lavis.md") from e

from vlr_plugins.integrations.lavis import datasets, model, processors, task  # noqa: E402
from vlr_plugins.integrations.lavis.datasets import (  # noqa: E402
    VlrParagraphBuilder,
    VlrParagraphDataset,
    VlrRetrievalBuilder,
    VlrRetrievalEvalDataset,
    VlrRetrievalSuite,
)
from vlr_plugins.integrations.lavis.model import BlipRetrievalTextOnly  # noqa: E402
from vlr_plugins.integrations.lavis.processors import VlrTextProcessor  # noqa: E402
from vlr_plugins.integrations.lavis.task import VlrRetrievalTask, lavis_metrics  # noqa: E402

__all__ = [
    "BlipRetrievalTextOnly",
    "VlrParagraphBuilder",
    "VlrParagraphDataset",
    "VlrRetrievalBuilder",
    "VlrRetrievalEvalDataset",
    "VlrRetrievalSuite",
    "VlrRetrievalTask",
    "VlrTextProcessor",
    "lavis_metrics",
    "datasets",
    "model",
    "processors",
    "task",
]
