"""CaRe stage I, fine-grained alignment (CaReBench sec. 4.1): caption SFT of an MLLM.

The causal-LM loss on the answer tokens only: cross-entropy of the next token at every
position whose label (:func:`~vlr_plugins.mllm.caption_sft.collate_caption_sft`: -100 on the
prompt and on padding) is supervised, averaged over those tokens. The LM head is applied to
the supervised positions only, so the (B, L, vocabulary) logits of a 10k-token video prompt
are never built.

What trains: the paper says nothing of stage I beyond its data, lr 2e-5, batch 64,
460,800 pixels and 16 frames, and freezes the vision encoder explicitly in stage II
("since there are no video inputs"); CaReBench releases no stage-I trainer. Here the
vision tower and its projector (Qwen2-VL's ``visual``, merger included) are frozen and
kept in eval mode by default (``freeze_vision``), and the LLM -- embeddings, layers and
LM head -- trains fully (``finetune="full"``) or through LoRA adapters (``"lora"``, as
stage II's :class:`~vlr_plugins.mllm.care_stage2.RetrievalAdaptation`). A plain
``nn.Module``: MMEngine's ``CaptionSFTModel`` is this module with a data preprocessor.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vlr_plugins.errors import ConfigError, loading_pretrained
from vlr_plugins.mllm.caption_sft import IGNORE_INDEX
from vlr_plugins.mllm.finetune import (
    FINETUNE_MODES,
    LORA_DEFAULTS,
    add_lora,
    enable_gradient_checkpointing,
    vision_modules,
)
from vlr_plugins.mllm.model_dtype import resolve_model_dtype

__all__ = ["FineGrainedAlignment", "answer_token_loss"]


def answer_token_loss(hidden: torch.Tensor, labels: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
    """Mean next-token cross-entropy over the supervised positions.

    ``hidden``: (B, L, H) last hidden states; ``labels``: (B, L), -100 where not supervised.
    Position t predicts token t + 1: ``CE(lm_head(hidden[:, t]), labels[:, t + 1])``, over the
    pairs whose target is supervised (transformers' causal-LM loss, computed on those rows only).
    """
    target = labels[:, 1:]
    keep = target != IGNORE_INDEX
    if not bool(keep.any()):
        raise ValueError("answer_token_loss: the batch has no supervised token (every label is -100)")
    logits = lm_head(hidden[:, :-1][keep])
    return F.cross_entropy(logits.float(), target[keep])


def _load(pretrained: str, dtype: str | None, attn_implementation: str | None, trust_remote_code: bool,
          owner: str) -> nn.Module:
    import transformers as tf

    kw: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    resolved = resolve_model_dtype(dtype, f"{owner}: dtype")
    if resolved is not None:
        kw["dtype"] = resolved
    if attn_implementation is not None:
        kw["attn_implementation"] = attn_implementation
    with loading_pretrained(pretrained, "model.pretrained", needs="config.json"):
        return tf.AutoModelForImageTextToText.from_pretrained(pretrained, **kw)


class FineGrainedAlignment(nn.Module):
    """Supervised video captioning of an MLLM on (video, caption) chats (CaRe stage I).

    ``pretrained``: the MLLM's folder / Hub id (``AutoModelForImageTextToText``; CaRe:
    Qwen2-VL-7B-Instruct), or ``model=`` a loaded one; ``finetune``: ``"full"`` or ``"lora"``
    (``lora`` overrides the adapters' settings, a ``peft.LoraConfig``'s keys);
    ``freeze_vision``: the vision tower and projector keep their weights and stay in eval
    mode; ``gradient_checkpointing``: activation checkpointing of the model.
    ``module_kwargs`` go to the next base class (a trainer's, e.g. MMEngine's
    ``data_preprocessor``); a plain module takes none.

    Batches come from :func:`~vlr_plugins.mllm.caption_sft.collate_caption_sft`;
    ``forward(mode="loss")`` returns ``{"loss": answer_token_loss(...)}``.
    :meth:`save_pretrained` writes the trained MLLM as a transformers folder (LoRA merged),
    which stage II loads as its embedder's ``pretrained``.

    Example::

        model = FineGrainedAlignment("Qwen/Qwen2-VL-7B-Instruct", dtype="bfloat16")
        loss = model(**collate_caption_sft([data[0], data[1]]), mode="loss")["loss"]
    """

    def __init__(self, pretrained: str | os.PathLike[str] | None = None, *, model: nn.Module | None = None,
                 dtype: str | None = None, attn_implementation: str | None = None, trust_remote_code: bool = False,
                 finetune: str = "full", lora: dict | None = None, freeze_vision: bool = True,
                 gradient_checkpointing: bool = False, **module_kwargs: Any) -> None:
        super().__init__(**module_kwargs)
        owner = type(self).__name__
        if finetune not in FINETUNE_MODES:
            raise ConfigError(f"{owner}: finetune must be one of {FINETUNE_MODES}, found {finetune!r}")
        if (pretrained is None) == (model is None):
            raise ConfigError(f"{owner} needs either pretrained= (a folder or Hub id) or model=, not both")
        self.pretrained = None if pretrained is None else str(pretrained)
        self.model = model if model is not None else _load(self.pretrained, dtype, attn_implementation,
                                                            trust_remote_code, owner)
        if self.model.get_output_embeddings() is None:
            raise ConfigError(f"{owner}: {type(self.model).__name__} has no LM head; stage I needs a "
                              f"generative MLLM (AutoModelForImageTextToText)")
        self.finetune = finetune
        self._vision = vision_modules(self.model) if freeze_vision else {}
        if freeze_vision and not self._vision:
            raise ConfigError(f"{owner}: freeze_vision=True, but {type(self.model).__name__} has none of "
                              f"the vision submodules this package knows; set freeze_vision=False")
        for module in self._vision.values():
            module.requires_grad_(False)
        if gradient_checkpointing:
            enable_gradient_checkpointing(self.model)
        self._peft: list[Any] = []  # peft's wrapper, kept out of the module tree (adapters are in self.model)
        if finetune == "lora":
            self._peft.append(add_lora(self.model, {**LORA_DEFAULTS, **(lora or {})}))
        self.train()

    def train(self, mode: bool = True) -> FineGrainedAlignment:
        super().train(mode)
        for module in self._vision.values():
            module.eval()
        return self

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor | None = None,
                mode: str = "loss", **media: Any) -> Any:
        """``mode="loss"``: ``{"loss"}`` on the supervised tokens; ``"tensor"``: the logits (B, L, V)."""
        backbone = self.model.model  # the MLLM without its LM head: vision tower + language model
        out = backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **media)
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        lm_head = self.model.get_output_embeddings()
        if mode == "loss":
            if labels is None:
                raise ValueError(f"{type(self).__name__}: mode='loss' needs labels (vlr_caption_sft_collate "
                                 f"makes them)")
            return {"loss": answer_token_loss(hidden, labels, lm_head)}
        if mode == "tensor":
            return lm_head(hidden)
        raise ValueError(f"{type(self).__name__}: mode must be 'loss' or 'tensor', got {mode!r}")

    def merged(self) -> nn.Module:
        """The transformers model with any LoRA adapters folded into its weights."""
        if self._peft:
            self.model = self._peft.pop().merge_and_unload()
        return self.model

    def save_pretrained(self, folder: str | os.PathLike[str], processor: Any = None) -> str:
        """Write the trained MLLM (LoRA merged, safetensors) and ``processor`` (default: the
        one of ``pretrained``) as a transformers folder: stage II's ``model.embedder.pretrained``."""
        model = self.merged()
        model.save_pretrained(folder)
        if processor is None and self.pretrained is not None:
            from transformers import AutoProcessor

            with loading_pretrained(self.pretrained, "model.pretrained"):
                processor = AutoProcessor.from_pretrained(self.pretrained)
        if processor is not None:
            processor.save_pretrained(folder)
        return str(folder)
