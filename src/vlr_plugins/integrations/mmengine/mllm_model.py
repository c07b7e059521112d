"""CaRe stage II / E5-V as an MMEngine ``BaseModel``: the core
:class:`~vlr_plugins.mllm.care_stage2.RetrievalAdaptation` with MMEngine's data preprocessor.

Everything that decides what trains (vision frozen and in eval mode, full or LoRA finetuning,
gradient checkpointing) and the step itself (a core EOLEmbedder + a core loss,
``SupervisedSimCSELoss``, eq. 4) is the core module's; this class only builds its parts from
configs of the ``vlr_plugins`` scope. The model *is* the core module (a subclass, not a holder
of one), so its parameters and checkpoint keys are the core module's own: ``embedder.``,
``loss_fn.``.
"""

from __future__ import annotations

from mmengine.model import BaseModel
from torch import nn

from vlr_plugins.integrations.mmengine import model as _core_entries  # noqa: F401  (core names in scope)
from vlr_plugins.integrations.mmengine.registry import MODELS
from vlr_plugins.mllm.care_stage2 import RetrievalAdaptation

__all__ = ["EOLContrastiveModel"]


@MODELS.register_module()
class EOLContrastiveModel(RetrievalAdaptation, BaseModel):
    """Retrieval adaptation of an MLLM on sentence triplets (CaRe stage II, E5-V).

    ``embedder``: a config (or built) :class:`~vlr_plugins.mllm.EOLEmbedder`; ``loss``: a
    core loss config, default ``SupervisedSimCSELoss`` with tau = 0.05; ``finetune``:
    ``"full"`` (every LLM weight trains, CaRe) or ``"lora"`` (adapters on the LLM's linear
    layers, E5-V: r 64, alpha 16, dropout 0.05; ``lora`` overrides, a ``peft.LoraConfig``'s
    keys); ``freeze_vision``: the vision tower and projector keep their weights and stay in
    eval mode; ``gradient_checkpointing``: CaReBench's ``--grad_checkpoint``
    (:class:`~vlr_plugins.mllm.care_stage2.RetrievalAdaptation`, which this is).

    Batches come from ``vlr_eol_triplets_collate``: sentences, positives and hard
    negatives in one left-padded block, encoded in one pass.
    """

    def __init__(self, embedder: dict | nn.Module, loss: dict | nn.Module | None = None, finetune: str = "full",
                 lora: dict | None = None, freeze_vision: bool = True, gradient_checkpointing: bool = False,
                 data_preprocessor: dict | None = None, init_cfg: dict | None = None) -> None:
        super().__init__(embedder, loss, finetune=finetune, lora=lora, freeze_vision=freeze_vision,
                         gradient_checkpointing=gradient_checkpointing, data_preprocessor=data_preprocessor,
                         init_cfg=init_cfg)

    def _build(self, cfg: dict | nn.Module, kind: str) -> nn.Module:
        # a config of this scope: the core names and the integration's own; a model folder that
        # cannot load is blamed on the recipe key that names it
        if isinstance(cfg, dict) and kind == "models" and isinstance(cfg.get("pretrained"), str):
            from vlr_plugins.errors import loading_pretrained

            with loading_pretrained(cfg["pretrained"], "model.embedder.pretrained", needs="config.json"):
                return MODELS.build(cfg)
        return MODELS.build(cfg) if isinstance(cfg, dict) else cfg
