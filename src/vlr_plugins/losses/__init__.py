"""Contrastive image-text losses and video-text pretraining losses in plain torch (no
trainer ecosystem imported).

Every loss computes on the global batch in a distributed run through the one
gather helper in :mod:`vlr_plugins.losses._gather` (masked language modeling, a per-token
loss, stays on each rank's captions). The contrastive losses decouple that batch from
memory with gradient caching (:func:`cached_encode`, the ``Cached*`` losses).
"""

from vlr_plugins.losses.infonce import (
    HardNegativeInfoNCELoss,
    InfoNCELoss,
    MultiPositiveInfoNCELoss,
)
from vlr_plugins.losses.functional import multi_positive_infonce
from vlr_plugins.losses.gradcache import cached_encode
from vlr_plugins.losses.mlm import MaskedLanguageModelingLoss, mask_tokens, masked_language_modeling
from vlr_plugins.losses.pcm import (
    PrimaryComponentMatchingLoss,
    primary_component_matching,
    principal_component_reconstruction,
)
from vlr_plugins.losses.cached import (
    CachedHardNegativeInfoNCELoss,
    CachedInfoNCELoss,
    CachedMultiPositiveInfoNCELoss,
    CachedPrimaryComponentMatchingLoss,
)
from vlr_plugins.losses.simcse import SupervisedSimCSELoss, supervised_simcse
from vlr_plugins.losses.video_text_fusion import VideoTextFusion
from vlr_plugins.losses.video_text_pretraining import VideoTextPretrainingLoss
from vlr_plugins.losses.vtc import VideoTextContrastiveLoss, video_text_contrastive
from vlr_plugins.losses.vtm import VideoTextMatchingLoss, sample_hard_negatives, video_text_matching

__all__ = [
    "multi_positive_infonce",
    "InfoNCELoss",
    "MultiPositiveInfoNCELoss",
    "HardNegativeInfoNCELoss",
    "primary_component_matching",
    "principal_component_reconstruction",
    "PrimaryComponentMatchingLoss",
    "cached_encode",
    "CachedInfoNCELoss",
    "CachedMultiPositiveInfoNCELoss",
    "CachedHardNegativeInfoNCELoss",
    "CachedPrimaryComponentMatchingLoss",
    "supervised_simcse",
    "SupervisedSimCSELoss",
    "VideoTextFusion",
    "video_text_contrastive",
    "VideoTextContrastiveLoss",
    "sample_hard_negatives",
    "video_text_matching",
    "VideoTextMatchingLoss",
    "mask_tokens",
    "masked_language_modeling",
    "MaskedLanguageModelingLoss",
    "VideoTextPretrainingLoss",
]
