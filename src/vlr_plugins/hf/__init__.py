"""Transformers classes for the encoders vlr-plugins trains, and their Hub-ready export.

Importing this module registers every member of the vlr retrieval family with
``AutoConfig`` / ``AutoModel``, so ``AutoModel.from_pretrained(folder)`` returns e.g. a
:class:`VlrTextEncoderModel`. A folder written by :func:`export_text_encoder` also
carries ``modeling_vlr.py`` / ``configuration_vlr.py``, so elsewhere
``AutoModel.from_pretrained(folder, trust_remote_code=True)`` needs only transformers.

The family: :class:`VlrRetrievalConfig` / :class:`VlrRetrievalPreTrainedModel` hold what
every retrieval encoder shares (embedding size, token budgets, image-embedding space,
recipe; ``forward`` / ``encode_text`` / ``get_text_features``); each member is one
config + model pair with its own ``model_type``, listed in :data:`FAMILY`.
"""

from __future__ import annotations


from vlr_plugins._lazy import lazy_exports

from vlr_plugins.hf.configuration_vlr import VlrRetrievalConfig, VlrTextEncoderConfig
from vlr_plugins.hf.export import export_text_encoder
from vlr_plugins.hf.modeling_vlr import (
    VlrRetrievalPreTrainedModel,
    VlrTextEncoderModel,
    VlrTextEncoderOutput,
)

__all__ = [
    "FAMILY",
    "VlrRetrievalConfig",
    "VlrRetrievalPreTrainedModel",
    "VlrTextEncoderConfig",
    "VlrTextEncoderModel",
    "VlrTextEncoderOutput",
    "build_model_card",
    "export_text_encoder",
    "register_auto_classes",
    "write_model_card",
]

#: (config, model) of every member of the vlr retrieval family; one line per model type
FAMILY: tuple[tuple[type[VlrRetrievalConfig], type[VlrRetrievalPreTrainedModel]], ...] = (
    (VlrTextEncoderConfig, VlrTextEncoderModel),
)


def register_auto_classes() -> None:
    """Map each :data:`FAMILY` ``model_type`` to its classes in ``AutoConfig`` / ``AutoModel``.

    Idempotent (runs on import). Takes over a name held by a copy of the same class, such
    as the remote code of an exported folder loaded earlier in this process; refuses a
    name that some other class holds.
    """
    from transformers import AutoConfig, AutoModel
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    for config_cls, model_cls in FAMILY:
        name = config_cls.model_type
        # not .get(): the lazy mapping's get() misses transformers' own, not yet imported, configs
        held = CONFIG_MAPPING[name] if name in CONFIG_MAPPING else None
        if held is not None and held.__name__ != config_cls.__name__:
            raise ValueError(f"model type {name!r} is already registered to "
                             f"{held.__module__}.{held.__qualname__}; vlr_plugins.hf cannot register "
                             f"{config_cls.__qualname__} under it")
        AutoConfig.register(name, config_cls, exist_ok=True)
        AutoModel.register(config_cls, model_cls, exist_ok=True)


register_auto_classes()

_LAZY = {"build_model_card": "vlr_plugins.hf.card", "write_model_card": "vlr_plugins.hf.card"}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
