"""LAVIS-trained text side -> a ``vlr`` text-encoder checkpoint, for ``vlr export`` / the Hub.

``vlr lavis-export`` (LAVIS environment) rebuilds ``blip_retrieval_textonly`` from a run
config plus the trained checkpoint, and writes what ``vlr train`` writes: a weights-only
torch file whose ``meta['vlr_text_encoder']`` describes a ``BlipTextEncoder`` (transformers'
``BlipTextModel`` + ``text_proj``) and whose ``state_dict`` holds its tensors, plus the
tokenizer folder beside it. ``vlr export`` in the main environment then turns that into a
Hub model folder (``AutoModel.from_pretrained``).

LAVIS' XBert (``lavis.models.med``) and transformers' BLIP text model are the same
network under the same parameter names (both ported from BLIP's ``med.py``), so the
conversion is a renaming of the prefix; the med config maps onto ``BlipTextConfig``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch

from vlr_plugins._io import atomic_open
from vlr_plugins.errors import ConfigError

__all__ = ["text_encoder_config", "write_vlr_checkpoint"]

# med config key -> BlipTextConfig key (both transformers 4.2x and 5.x accept these)
_CONFIG_KEYS = {
    "vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_hidden_layers": "num_hidden_layers",
    "num_attention_heads": "num_attention_heads", "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_position_embeddings", "hidden_act": "hidden_act",
    "layer_norm_eps": "layer_norm_eps", "hidden_dropout_prob": "hidden_dropout_prob",
    "attention_probs_dropout_prob": "attention_probs_dropout_prob", "initializer_range": "initializer_range",
    "encoder_width": "encoder_hidden_size", "pad_token_id": "pad_token_id",
}


def text_encoder_config(model, tokenizer_dir: str) -> dict[str, Any]:
    """``meta['vlr_text_encoder']`` for ``model`` (a ``BlipRetrievalTextOnly``)."""
    med = model.text_encoder.config
    if getattr(med, "add_type_embeddings", False):
        raise ConfigError("this text tower has token-type embeddings, which BlipTextModel lacks")
    cfg = {dst: getattr(med, src) for src, dst in _CONFIG_KEYS.items() if hasattr(med, src)}
    tok = model.tokenizer
    cfg |= {"bos_token_id": tok.bos_token_id, "sep_token_id": tok.sep_token_id, "is_decoder": True}
    return {"type": "BlipTextEncoder", "config": cfg, "embed_dim": model.text_proj.out_features,
            "tokenizer": tokenizer_dir}


def write_vlr_checkpoint(model, out: str | os.PathLike, recipe: dict | None = None) -> Path:
    """Write ``out`` (.pth) and its tokenizer folder ``<out stem>-tokenizer/``.

    ``meta`` holds the encoder's architecture, ``recipe`` when given, and the configuration
    of the model's ``vlr_plugins`` loss (``meta['vlr_loss']``, with a learned temperature
    as loaded from the trained checkpoint) for the model card of ``vlr export``."""
    from vlr_plugins.checkpoint_meta import loss_config

    out = Path(out)
    tok_dir = out.with_name(out.stem + "-tokenizer")
    model.tokenizer.save_pretrained(str(tok_dir))
    state = {f"text_encoder.{k}": v.detach().cpu().clone() for k, v in model.state_dict().items()
             if k.startswith(("text_encoder.", "text_proj.")) and not k.endswith("position_ids")}
    meta: dict[str, Any] = {"vlr_text_encoder": text_encoder_config(model, str(tok_dir.resolve())),
                            "source": "vlr_plugins.integrations.lavis (blip_retrieval_textonly)"}
    if recipe is not None:
        meta["vlr_recipe"] = json.loads(json.dumps(recipe))
    loss = loss_config(getattr(model, "loss_fn", None))
    if loss is not None:  # the trained loss (a learned temperature too), for the model card
        meta["vlr_loss"] = loss
    with atomic_open(out, "wb") as f:
        torch.save({"meta": meta, "state_dict": state}, f)
    return out
