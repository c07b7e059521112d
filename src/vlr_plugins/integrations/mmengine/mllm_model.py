"""CaRe stage II / E5-V as an MMEngine ``BaseModel``: a core EOLEmbedder + a core loss.

The vision side of the MLLM (tower and projector) is frozen and kept in eval mode, since
stage II sees no pixels; the language model trains fully (CaRe) or through LoRA adapters
(E5-V), by one switch. The loss math is the core's (``SupervisedSimCSELoss``, eq. 4).
"""

from __future__ import annotations

import re
from typing import Any

import torch
from mmengine.model import BaseModel
from torch import nn

from vlr_plugins.integrations.mmengine import model as _core_entries  # noqa: F401  (core names in scope)
from vlr_plugins.integrations.mmengine.registry import MODELS

__all__ = ["EOLContrastiveModel", "FINETUNE_MODES", "LORA_DEFAULTS", "VISION_MODULES", "add_lora",
           "enable_gradient_checkpointing", "vision_modules"]

FINETUNE_MODES = ("full", "lora")
#: submodules that make the vision side of an MLLM (Qwen2-VL: visual; LLaVA: vision_tower + projector)
VISION_MODULES = ("visual", "vision_tower", "vision_model", "multi_modal_projector", "mm_projector")
# E5-V's adapters: every linear layer of the LLM (run.sh, --lora_target_modules)
LORA_DEFAULTS = dict(r=64, lora_alpha=16, lora_dropout=0.05,
                     target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])


def vision_modules(model: nn.Module) -> dict[str, nn.Module]:
    """The outermost submodules of ``model`` named in :data:`VISION_MODULES`, by path."""
    out: dict[str, nn.Module] = {}
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] in VISION_MODULES and not any(name.startswith(p + ".") for p in out):
            out[name] = module
    return out


def enable_gradient_checkpointing(hf: nn.Module) -> None:
    """Activation checkpointing of a transformers model (non-reentrant), its KV cache off."""
    hf.config.use_cache = False
    if hasattr(hf, "activation_checkpointing_enable"):  # its name from transformers 5.x on
        hf.activation_checkpointing_enable({"use_reentrant": False})
    else:
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def add_lora(hf: nn.Module, cfg: dict[str, Any]) -> Any:
    """LoRA adapters (``cfg``: a ``peft.LoraConfig``'s keys) injected into ``hf`` in place, on
    the LLM's layers only; returns peft's wrapper (``merge_and_unload`` folds them back)."""
    from peft import LoraConfig, get_peft_model

    cfg = dict(cfg)
    targets = cfg.pop("target_modules")
    if isinstance(targets, (list, tuple)):
        # the LLM's layers only: a vision tower may use the same names (CLIP's q_proj)
        skip = "|".join(re.escape(n) for n in VISION_MODULES)
        names = "|".join(re.escape(t) for t in targets)
        targets = rf"^(?!(?:.*\.)?(?:{skip})\.).*\.(?:{names})$"
    return get_peft_model(hf, LoraConfig(target_modules=targets, bias="none", **cfg))


@MODELS.register_module()
class EOLContrastiveModel(BaseModel):
    """Retrieval adaptation of an MLLM on sentence triplets (CaRe stage II, E5-V).

    ``embedder``: a config (or built) :class:`~vlr_plugins.mllm.EOLEmbedder`; ``loss``: a
    core loss config, default ``SupervisedSimCSELoss`` with tau = 0.05; ``finetune``:
    ``"full"`` (every LLM weight trains, CaRe) or ``"lora"`` (adapters on the LLM's linear
    layers, E5-V: r 64, alpha 16, dropout 0.05; ``lora`` overrides, a ``peft.LoraConfig``'s
    keys); ``freeze_vision``: the vision tower and projector keep their weights and stay in
    eval mode; ``gradient_checkpointing``: CaReBench's ``--grad_checkpoint``.

    Batches come from ``vlr_eol_triplets_collate``: sentences, positives and hard
    negatives in one left-padded block, encoded in one pass.
    """

    def __init__(self, embedder: dict | nn.Module, loss: dict | nn.Module | None = None, finetune: str = "full",
                 lora: dict | None = None, freeze_vision: bool = True, gradient_checkpointing: bool = False,
                 data_preprocessor: dict | None = None, init_cfg: dict | None = None) -> None:
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        if finetune not in FINETUNE_MODES:
            raise ValueError(f"EOLContrastiveModel: finetune must be one of {FINETUNE_MODES}, found {finetune!r}")
        self.embedder = MODELS.build(embedder) if isinstance(embedder, dict) else embedder
        loss = loss if loss is not None else dict(type="SupervisedSimCSELoss", temperature=0.05)
        self.loss_fn = MODELS.build(loss) if isinstance(loss, dict) else loss
        self.finetune = finetune
        hf = self.embedder.model
        self._vision = vision_modules(hf) if freeze_vision else {}
        # the LM head is never used: the embedding is the last hidden state
        frozen = [*self._vision.values(), *([hf.get_output_embeddings()] if hf.get_output_embeddings() else [])]
        for module in frozen:
            module.requires_grad_(False)
        if gradient_checkpointing:
            enable_gradient_checkpointing(hf)
        self._peft: list[Any] = []  # the peft wrapper, kept out of the module tree
        if finetune == "lora":
            self._add_lora({**LORA_DEFAULTS, **(lora or {})})
        self.train()

    def _add_lora(self, cfg: dict[str, Any]) -> None:
        # adapters are injected into self.embedder.model in place; the wrapper is kept for merging
        self._peft.append(add_lora(self.embedder.model, cfg))

    def merge_lora(self) -> nn.Module:
        """Fold the adapters into the LLM's weights (``merge_and_unload``); returns the plain
        transformers model, which ``save_pretrained`` then writes as a full checkpoint."""
        if not self._peft:
            raise ValueError("merge_lora: this model has no LoRA adapters (finetune='full')")
        merged = self._peft.pop().merge_and_unload()
        self.embedder.model = merged
        return merged

    def train(self, mode: bool = True) -> EOLContrastiveModel:
        super().train(mode)
        for module in self._vision.values():
            module.eval()
        return self

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, num_anchors: int,
                mode: str = "tensor", **_: Any) -> Any:
        emb = self.embedder.embed({"input_ids": input_ids, "attention_mask": attention_mask})
        n = int(num_anchors)
        if emb.shape[0] not in (2 * n, 3 * n):
            raise ValueError(f"EOLContrastiveModel: {emb.shape[0]} rows for {n} sentences; expected "
                             f"sentences, positives (and hard negatives) in one block")
        anchor, positive = emb[:n], emb[n:2 * n]
        negative = emb[2 * n:] if emb.shape[0] == 3 * n else None
        if mode == "loss":
            return {"loss": self.loss_fn(anchor, positive, negative)}
        if mode == "tensor":
            return emb
        if mode == "predict":
            return [{"anchor": a.detach().float().cpu(), "positive": p.detach().float().cpu()}
                    for a, p in zip(anchor, positive)]
        raise ValueError(f"mode must be 'loss', 'predict' or 'tensor', got {mode!r}")
