"""The text-only retrieval model as an MMEngine ``BaseModel``: core encoder + core loss."""

from __future__ import annotations

from typing import Any

import torch
from mmengine.model import BaseModel

from vlr_plugins import registry as core
from vlr_plugins.integrations.mmengine.registry import MODELS
from vlr_plugins.text.length_blocks import check_length_blocks, encode_in_length_blocks

__all__ = ["TextOnlyRetrievalModel"]

# the core losses and text encoders, reachable by name from any config of this scope
# (e.g. a loss inside another model); the objects are the core's, not copies
for _entry in (*core.LOSSES.entries(), *core.MODELS.entries()):
    if _entry.name not in MODELS.module_dict:
        MODELS.register_module(name=_entry.name, module=_entry.obj)


@MODELS.register_module()
class TextOnlyRetrievalModel(BaseModel):
    """Trains a text encoder against frozen, precomputed image embeddings.

    ``text_encoder`` and ``loss`` are configs (or built modules) of the core registries
    (``vlr list``), which are also registered here; the vision tower never runs. Batches come
    from ``vlr_text_views_collate``: all texts of the batch (positives, then hard negatives)
    in one padded block.

    ``length_blocks`` (the recipe's ``train.length_blocks``): that block is encoded in at
    most that many blocks of similar length, each cut to its own longest text
    (:func:`~vlr_plugins.text.encode_in_length_blocks`), so that the captions of a batch are
    not padded to its paragraphs' length; 1 encodes it in one pass. Same embeddings and
    gradients either way, to float rounding.

    A loss with ``cache_chunk`` (``loss: {type: MultiPositiveInfoNCELoss, cache_chunk: 32}``,
    or a ``Cached*`` loss) makes the training pass encode that block with gradient caching
    (:func:`~vlr_plugins.losses.cached_encode`): the step is MMEngine's own
    ``optim_wrapper.update_params(loss)``, whose backward re-encodes chunk by chunk, so
    gradient accumulation, AMP and distributed training keep their meaning. With
    ``length_blocks`` > 1 too, the texts are sorted by length before they are chunked and
    each chunk is cut to its own longest.
    """

    def __init__(self, text_encoder: dict, loss: dict, data_preprocessor: dict | None = None,
                 init_cfg: dict | None = None, length_blocks: int = 1) -> None:
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        check_length_blocks("TextOnlyRetrievalModel", length_blocks)
        self.length_blocks = length_blocks
        self.text_encoder = MODELS.build(text_encoder) if isinstance(text_encoder, dict) else text_encoder
        self.loss_fn = MODELS.build(loss) if isinstance(loss, dict) else loss

    def forward(
        self,
        image_emb: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        text_owner: torch.Tensor,
        neg_owner: torch.Tensor | None = None,
        ids: list[str] | None = None,
        split: list[str] | None = None,
        mode: str = "tensor",
    ) -> Any:
        chunk = getattr(self.loss_fn, "cache_chunk", None) if mode == "loss" else None
        emb = encode_in_length_blocks(self.text_encoder, input_ids, attention_mask, blocks=self.length_blocks,
                                      chunk_size=chunk, parameters=self.text_encoder)
        n = text_owner.shape[0]
        text_emb, neg_emb = emb[:n], emb[n:]
        if mode == "loss":
            if image_emb.shape[1] != text_emb.shape[1]:
                raise ValueError(f"the stored image embeddings are {image_emb.shape[1]}-d but the text "
                                 f"encoder outputs {text_emb.shape[1]}-d vectors; they must share one space")
            has_neg = neg_owner is not None and neg_owner.numel() > 0
            loss = self.loss_fn(image_emb, text_emb, text_owner,
                                neg_emb if has_neg else None, neg_owner if has_neg else None)
            return {"loss": loss}
        if mode == "predict":
            owner = text_owner.tolist()
            return [
                {"id": ids[i] if ids else str(i), "split": split[i] if split else "val",
                 "image_emb": image_emb[i].detach().float().cpu(),
                 "text_emb": text_emb[[j for j, o in enumerate(owner) if o == i]].detach().float().cpu()}
                for i in range(image_emb.shape[0])
            ]
        if mode == "tensor":
            return text_emb
        raise ValueError(f"mode must be 'loss', 'predict' or 'tensor', got {mode!r}")
