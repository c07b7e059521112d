"""CaRe stage II, retrieval adaptation (CaReBench sec. 4.2), and E5-V: an MLLM trained
contrastively on sentence triplets under an EOL prompt.

An :class:`~vlr_plugins.mllm.EOLEmbedder` embeds the sentences, positives and hard negatives
of a batch in one pass; the loss is the core's ``SupervisedSimCSELoss`` (eq. 4). The vision
side of the MLLM (tower and projector) is frozen and kept in eval mode, since stage II sees no
pixels; the language model trains fully (CaRe) or through LoRA adapters (E5-V), by one switch
(:mod:`vlr_plugins.mllm.finetune`). A plain ``nn.Module``: a torch loop trains it as it is, and
MMEngine's ``EOLContrastiveModel`` is this module with a data preprocessor.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from vlr_plugins.mllm.finetune import (
    FINETUNE_MODES,
    LORA_DEFAULTS,
    add_lora,
    enable_gradient_checkpointing,
    vision_modules,
)

__all__ = ["RetrievalAdaptation"]

#: stage II's loss unless one is given: eq. 4 with tau = 0.05 (CaReBench, E5-V)
_DEFAULT_LOSS = dict(type="SupervisedSimCSELoss", temperature=0.05)


class RetrievalAdaptation(nn.Module):
    """Retrieval adaptation of an MLLM on sentence triplets (CaRe stage II, E5-V).

    ``embedder``: an :class:`~vlr_plugins.mllm.EOLEmbedder` (or its config); ``loss``: a core
    loss (or its config), default ``SupervisedSimCSELoss`` with tau = 0.05; ``finetune``:
    ``"full"`` (every LLM weight trains, CaRe) or ``"lora"`` (adapters on the LLM's linear
    layers, E5-V: r 64, alpha 16, dropout 0.05; ``lora`` overrides, a ``peft.LoraConfig``'s
    keys); ``freeze_vision``: the vision tower and projector keep their weights and stay in
    eval mode; ``gradient_checkpointing``: CaReBench's ``--grad_checkpoint``. The LM head is
    never used (the embedding is the last hidden state) and never trains.
    ``module_kwargs`` go to the next base class (a trainer's, e.g. MMEngine's
    ``data_preprocessor``); a plain module takes none.

    Batches come from :func:`~vlr_plugins.mllm.collate_eol_triplets`: sentences, positives and
    hard negatives in one left-padded block, encoded in one pass; ``forward(mode="loss")``
    returns ``{"loss"}``.

    Example::

        model = RetrievalAdaptation(EOLEmbedder("path/to/stage1", prompt="care"))
        loss = model(**collate_eol_triplets([data[0], data[1]]), mode="loss")["loss"]
    """

    def __init__(self, embedder: dict | nn.Module, loss: dict | nn.Module | None = None, finetune: str = "full",
                 lora: dict | None = None, freeze_vision: bool = True, gradient_checkpointing: bool = False,
                 **module_kwargs: Any) -> None:
        super().__init__(**module_kwargs)
        if finetune not in FINETUNE_MODES:
            raise ValueError(f"{type(self).__name__}: finetune must be one of {FINETUNE_MODES}, found {finetune!r}")
        self.embedder = self._build(embedder, "models")
        self.loss_fn = self._build(loss if loss is not None else dict(_DEFAULT_LOSS), "losses")
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

    def _build(self, cfg: dict | nn.Module, kind: str) -> nn.Module:
        """``cfg`` built by the core registry ``kind`` (``"models"``, ``"losses"``); a module as it is."""
        from vlr_plugins.registry import all_registries

        return all_registries()[kind].build(cfg) if isinstance(cfg, dict) else cfg

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

    def train(self, mode: bool = True) -> RetrievalAdaptation:
        super().train(mode)
        for module in self._vision.values():
            module.eval()
        return self

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, num_anchors: int,
                mode: str = "tensor", **_: Any) -> Any:
        """``input_ids`` / ``attention_mask``: (2N or 3N, L), the N sentences, then their positives
        (then hard negatives). ``mode="loss"``: ``{"loss"}``; ``"tensor"``: the embeddings
        (2N or 3N, D); ``"predict"``: per sentence ``{"anchor", "positive"}`` on the CPU."""
        emb = self.embedder.embed({"input_ids": input_ids, "attention_mask": attention_mask})
        n = int(num_anchors)
        if emb.shape[0] not in (2 * n, 3 * n):
            raise ValueError(f"{type(self).__name__}: {emb.shape[0]} rows for {n} sentences; expected "
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
