"""What of an MLLM trains in CaRe's two stages and in E5-V: the LLM, never the vision side.

CaRe stage II "freeze[s] the vision encoder and train[s] the LLM only" (CaReBench sec. 4.2,
"since there are no video inputs"), fully fine-tuned; E5-V trains the same LLM through LoRA
adapters on every linear layer. Stage I (:mod:`vlr_plugins.mllm.care_stage1`) keeps the same
split by default. This module holds the pieces both stages share: which submodules make the
vision side (:func:`vision_modules`), LoRA restricted to the LLM (:func:`add_lora`,
:data:`LORA_DEFAULTS`) and activation checkpointing (:func:`enable_gradient_checkpointing`).

peft is imported when adapters are added.
"""

from __future__ import annotations

import re
from typing import Any

from torch import nn

__all__ = ["FINETUNE_MODES", "LORA_DEFAULTS", "VISION_MODULES", "add_lora", "enable_gradient_checkpointing",
           "vision_modules"]

#: ``"full"``: every LLM weight trains (CaRe); ``"lora"``: adapters on the LLM's layers (E5-V)
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
