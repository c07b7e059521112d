"""Transformers classes for the encoders vlr-plugins trains, and their Hub-ready export.

Importing this module registers every member of the vlr retrieval family with
``AutoConfig`` / ``AutoModel``, so ``AutoModel.from_pretrained(folder)`` returns e.g. a
:class:`VlrTextEncoderModel`. A folder written by :func:`export_text_encoder` also
carries ``modeling_vlr.py`` / ``configuration_vlr.py``, so elsewhere
``AutoModel.from_pretrained(folder, trust_remote_code=True)`` needs only transformers.

The family: :class:`VlrRetrievalConfig` / :class:`VlrRetrievalPreTrainedModel` hold what
every retrieval encoder shares (embedding size, token budgets, image-embedding space,
recipe; ``forward`` / ``encode_text`` / ``get_text_features``); each member is one
config + model pair with its own ``model_type``, listed in :data:`FAMILY`
(:mod:`vlr_plugins.hf.family`): :class:`VlrTextEncoderModel` (BLIP's text side) and
:class:`VlrDualCLSTextEncoderModel` (MVC's dual-CLS BERT, ``encode_text(..., view=)``).

The MLLM member (CaRe, E5-V) keeps its base model's own ``model_type``: an export
(:func:`export_eol_embedder`) is the MLLM's transformers folder plus ``modeling_vlr_eol.py``
(:class:`~vlr_plugins.hf.modeling_vlr_eol.VlrEOLEmbeddingModel`, named in ``auto_map``), so
vLLM and ``AutoModelForImageTextToText`` still load it, and
``AutoModel.from_pretrained(folder, trust_remote_code=True)`` gives the embedding model; its
card comes from :func:`build_eol_model_card`.
"""

from __future__ import annotations


from vlr_plugins._lazy import lazy_exports

from vlr_plugins.hf.configuration_vlr import VlrRetrievalConfig, VlrTextEncoderConfig
from vlr_plugins.hf.configuration_vlr_dual_cls import VlrDualCLSTextEncoderConfig
from vlr_plugins.hf.export import check_export_target, export_text_encoder
from vlr_plugins.hf.family import FAMILY, register_auto_classes
from vlr_plugins.hf.modeling_vlr import (
    VlrRetrievalPreTrainedModel,
    VlrTextEncoderModel,
    VlrTextEncoderOutput,
)
from vlr_plugins.hf.modeling_vlr_dual_cls import VlrDualCLSTextEncoderModel

__all__ = [
    "FAMILY",
    "VlrDualCLSTextEncoderConfig",
    "VlrDualCLSTextEncoderModel",
    "VlrRetrievalConfig",
    "VlrRetrievalPreTrainedModel",
    "VlrTextEncoderConfig",
    "VlrTextEncoderModel",
    "VlrTextEncoderOutput",
    "VlrEOLEmbeddingModel",
    "build_eol_model_card",
    "build_model_card",
    "check_export_target",
    "export_eol_embedder",
    "export_text_encoder",
    "register_auto_classes",
    "write_model_card",
]

register_auto_classes()

_LAZY = {"build_model_card": "vlr_plugins.hf.card", "write_model_card": "vlr_plugins.hf.card",
         "build_eol_model_card": "vlr_plugins.hf.eol_card", "export_eol_embedder": "vlr_plugins.hf.export_eol",
         "VlrEOLEmbeddingModel": "vlr_plugins.hf.modeling_vlr_eol"}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
