"""The vlr retrieval family: the (config, model) pair of each member, and their Auto-class names.

Kept apart from the package ``__init__`` so that :mod:`~vlr_plugins.hf.export` can look a
member up without importing the package that imports it. Only the package imports
``configuration_vlr*`` / ``modeling_vlr*`` from here: those files travel as remote code in
exported folders and import nothing of vlr_plugins.
"""

from __future__ import annotations

from vlr_plugins.hf.configuration_vlr import VlrRetrievalConfig, VlrTextEncoderConfig
from vlr_plugins.hf.configuration_vlr_dual_cls import VlrDualCLSTextEncoderConfig
from vlr_plugins.hf.modeling_vlr import VlrRetrievalPreTrainedModel, VlrTextEncoderModel
from vlr_plugins.hf.modeling_vlr_dual_cls import VlrDualCLSTextEncoderModel

__all__ = ["FAMILY", "register_auto_classes"]

#: (config, model) of every member of the vlr retrieval family; one line per model type
FAMILY: tuple[tuple[type[VlrRetrievalConfig], type[VlrRetrievalPreTrainedModel]], ...] = (
    (VlrTextEncoderConfig, VlrTextEncoderModel),
    (VlrDualCLSTextEncoderConfig, VlrDualCLSTextEncoderModel),
)


def register_auto_classes() -> None:
    """Map each :data:`FAMILY` ``model_type`` to its classes in ``AutoConfig`` / ``AutoModel``.

    Idempotent (``import vlr_plugins.hf`` runs it). Takes over a name held by a copy of the
    same class, such as the remote code of an exported folder loaded earlier in this
    process; refuses a name that some other class holds.
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
    _register_video_processor()


def _register_video_processor() -> None:
    # an MVC export's video_preprocessor_config.json names VlrVideoProcessor; registered, it
    # loads with AutoVideoProcessor without trust_remote_code (needs torchvision and a
    # transformers with video processors: without them only the remote code loads it)
    try:
        from transformers import AutoProcessor, AutoVideoProcessor

        from vlr_plugins.hf.processing_vlr import VlrVideoTextProcessor
        from vlr_plugins.hf.video_processing_vlr import VlrVideoProcessor
    except ImportError:
        return
    AutoVideoProcessor.register(VlrDualCLSTextEncoderConfig, VlrVideoProcessor, exist_ok=True)
    AutoProcessor.register(VlrDualCLSTextEncoderConfig, VlrVideoTextProcessor, exist_ok=True)
