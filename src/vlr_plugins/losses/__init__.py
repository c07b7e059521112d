"""Contrastive image-text losses in plain torch (no trainer ecosystem imported).

Every loss computes on the global batch in a distributed run through the one
gather helper in :mod:`vlr_plugins.losses._gather`.
"""

from vlr_plugins.losses.infonce import (
    HardNegativeInfoNCELoss,
    InfoNCELoss,
    MultiPositiveInfoNCELoss,
)
from vlr_plugins.losses.functional import multi_positive_infonce
from vlr_plugins.losses.pcm import (
    PrimaryComponentMatchingLoss,
    primary_component_matching,
    principal_component_reconstruction,
)
from vlr_plugins.losses.simcse import SupervisedSimCSELoss, supervised_simcse

__all__ = [
    "multi_positive_infonce",
    "InfoNCELoss",
    "MultiPositiveInfoNCELoss",
    "HardNegativeInfoNCELoss",
    "primary_component_matching",
    "principal_component_reconstruction",
    "PrimaryComponentMatchingLoss",
    "supervised_simcse",
    "SupervisedSimCSELoss",
]
