"""Stage-II data in the ``vlr_plugins`` scope: the core EOL triplets dataset and its collate.

Declarations only (as mmpretrain declares shared datasets): the work is
:class:`vlr_plugins.mllm.EOLTripletsDataset` and :func:`vlr_plugins.mllm.collate_eol_triplets`.
"""

from __future__ import annotations

from vlr_plugins.integrations.mmengine.registry import DATASETS, FUNCTIONS
from vlr_plugins.mllm.triplets import EOLTripletsDataset, collate_eol_triplets

__all__ = ["EOLTripletsDataset", "vlr_eol_triplets_collate"]

DATASETS.register_module(name="EOLTripletsDataset", module=EOLTripletsDataset)
#: configs name it with its scope: ``collate_fn=dict(type="vlr_plugins.vlr_eol_triplets_collate")``
vlr_eol_triplets_collate = collate_eol_triplets
FUNCTIONS.register_module(name="vlr_eol_triplets_collate", module=collate_eol_triplets)
