"""MMEngine integration: registries of the ``vlr_plugins`` scope, filled from the core.

The models (text-only retrieval, MVC video-text pretraining, CaRe's MLLM stages), datasets,
collate functions, MVC's batch samplers, metric and hooks register themselves
when their module is imported, and each registry lists its modules as ``locations=``
(:mod:`.registry`): configs reach them with ``custom_imports=dict(imports=
['vlr_plugins.integrations.mmengine'])`` and ``default_scope='vlr_plugins'``, and MMEngine
imports a registry's modules on its first lookup. Importing this package therefore loads
only the registries; the names below are imported on first use.
"""

from __future__ import annotations

from vlr_plugins._lazy import lazy_exports
from vlr_plugins.integrations.mmengine.registry import DATASETS, FUNCTIONS, HOOKS, METRICS, MODELS

__all__ = [
    "DATASETS", "FUNCTIONS", "HOOKS", "METRICS", "MODELS",
    "ParagraphTextViewsDataset", "RetrievalEvalDataset", "RetrievalRecallMetric",
    "TextOnlyRetrievalModel", "WeightsOnlyCheckpointHook",
    "MVCVideoTextDataset", "VideoTextPretrainingModel", "vlr_mvc_collate", "MinedHardNegativeBatchSampler",
    "GlobalBatchSampler",
    "recipe_to_mmengine_config", "vlr_text_views_collate",
]

_HERE = "vlr_plugins.integrations.mmengine"
_LAZY = {
    "ParagraphTextViewsDataset": f"{_HERE}.dataset",
    "RetrievalEvalDataset": f"{_HERE}.dataset",
    "vlr_text_views_collate": f"{_HERE}.dataset",
    "RetrievalRecallMetric": f"{_HERE}.metric",
    "TextOnlyRetrievalModel": f"{_HERE}.model",
    "WeightsOnlyCheckpointHook": f"{_HERE}.hooks",
    "MVCVideoTextDataset": f"{_HERE}.mvc_dataset",
    "vlr_mvc_collate": f"{_HERE}.mvc_dataset",
    "MinedHardNegativeBatchSampler": f"{_HERE}.hard_negative_sampler",
    "GlobalBatchSampler": f"{_HERE}.global_batch_sampler",
    "VideoTextPretrainingModel": f"{_HERE}.mvc_model",
    "recipe_to_mmengine_config": f"{_HERE}.config",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
