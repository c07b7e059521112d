"""MMEngine integration: registries of the ``vlr_plugins`` scope, filled from the core.

Importing this module registers the models (text-only retrieval, MVC video-text
pretraining, CaRe's MLLM), datasets, collate functions, metric and checkpoint hook; configs
reach it with ``custom_imports`` and ``default_scope='vlr_plugins'``.
"""

from vlr_plugins.integrations.mmengine import dataset, hooks, metric, model  # noqa: F401
from vlr_plugins.integrations.mmengine import mllm_model, nli_dataset  # noqa: F401  (CaRe / E5-V stage II)
from vlr_plugins.integrations.mmengine import caption_sft_dataset, mllm_sft_model, pretrained_export  # noqa: F401  (CaRe stage I)
from vlr_plugins.integrations.mmengine import mvc_dataset, mvc_model  # noqa: F401  (MVC video-text pretraining)
from vlr_plugins.integrations.mmengine.config import recipe_to_mmengine_config
from vlr_plugins.integrations.mmengine.dataset import (
    ParagraphTextViewsDataset,
    RetrievalEvalDataset,
    vlr_text_views_collate,
)
from vlr_plugins.integrations.mmengine.metric import RetrievalRecallMetric
from vlr_plugins.integrations.mmengine.model import TextOnlyRetrievalModel
from vlr_plugins.integrations.mmengine.mvc_dataset import MVCVideoTextDataset, vlr_mvc_collate
from vlr_plugins.integrations.mmengine.mvc_model import VideoTextPretrainingModel
from vlr_plugins.integrations.mmengine.hooks import WeightsOnlyCheckpointHook
from vlr_plugins.integrations.mmengine.registry import DATASETS, FUNCTIONS, HOOKS, METRICS, MODELS

__all__ = [
    "DATASETS", "FUNCTIONS", "HOOKS", "METRICS", "MODELS",
    "ParagraphTextViewsDataset", "RetrievalEvalDataset", "RetrievalRecallMetric",
    "TextOnlyRetrievalModel", "WeightsOnlyCheckpointHook",
    "MVCVideoTextDataset", "VideoTextPretrainingModel", "vlr_mvc_collate",
    "recipe_to_mmengine_config", "vlr_text_views_collate",
]
