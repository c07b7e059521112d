"""CaRe stage I (fine-grained alignment) as an MMEngine ``BaseModel``: the core
:class:`~vlr_plugins.mllm.care_stage1.FineGrainedAlignment` with MMEngine's data preprocessor.

The loss (the answer tokens' cross-entropy), what trains (vision frozen and in eval mode, full
or LoRA finetuning), the forward and the export (``save_pretrained``, which
``ExportPretrainedHook`` calls) are the core module's. The model *is* the core module (a
subclass), so its checkpoint keys are the core module's own: ``model.``, the transformers
model's keys under it.
"""

from __future__ import annotations

import os

from mmengine.model import BaseModel
from torch import nn

from vlr_plugins.integrations.mmengine.registry import MODELS
from vlr_plugins.mllm.care_stage1 import FineGrainedAlignment

__all__ = ["CaptionSFTModel"]


@MODELS.register_module()
class CaptionSFTModel(FineGrainedAlignment, BaseModel):
    """Supervised video captioning of an MLLM on (video, caption) chats (CaRe stage I).

    ``pretrained``: the MLLM's folder / Hub id (``AutoModelForImageTextToText``; CaRe:
    Qwen2-VL-7B-Instruct), or ``model=`` a loaded one; ``finetune``: ``"full"`` or ``"lora"``
    (``lora`` overrides the adapters' settings, a ``peft.LoraConfig``'s keys);
    ``freeze_vision``: the vision tower and projector keep their weights and stay in eval
    mode; ``gradient_checkpointing``: activation checkpointing of the model
    (:class:`~vlr_plugins.mllm.care_stage1.FineGrainedAlignment`, which this is).

    Batches come from ``vlr_caption_sft_collate``; ``forward(mode="loss")`` returns
    ``{"loss": answer_token_loss(...)}``. :meth:`save_pretrained` writes the trained MLLM
    as a transformers folder (LoRA merged), which stage II loads as
    ``model.embedder.pretrained`` (``ExportPretrainedHook`` does it after training).

    Example::

        model = CaptionSFTModel("Qwen/Qwen2-VL-7B-Instruct", dtype="bfloat16")
        loss = model(**collate_caption_sft([data[0], data[1]]), mode="loss")["loss"]
    """

    def __init__(self, pretrained: str | os.PathLike[str] | None = None, *, model: nn.Module | None = None,
                 dtype: str | None = None, attn_implementation: str | None = None, trust_remote_code: bool = False,
                 finetune: str = "full", lora: dict | None = None, freeze_vision: bool = True,
                 gradient_checkpointing: bool = False, data_preprocessor: dict | None = None,
                 init_cfg: dict | None = None) -> None:
        super().__init__(pretrained, model=model, dtype=dtype, attn_implementation=attn_implementation,
                         trust_remote_code=trust_remote_code, finetune=finetune, lora=lora,
                         freeze_vision=freeze_vision, gradient_checkpointing=gradient_checkpointing,
                         data_preprocessor=data_preprocessor, init_cfg=init_cfg)
