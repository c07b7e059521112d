"""Model-specific appliers behind :func:`vlr_plugins.text.extend_text_context`.

Recognised by their attributes, so neither open_clip nor transformers is imported here.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from vlr_plugins.text.positions import freeze_leading_rows, stretch_positional_embedding


def apply_extension(
    model: nn.Module, new_length: int, *, keep: int, train_new_only: bool
) -> nn.Module:
    from vlr_plugins.text.blip_text_encoder import BlipTextEncoder

    options = {"keep": keep, "train_new_only": train_new_only}
    if isinstance(model, BlipTextEncoder):
        _extend_hf(model.text_encoder, new_length, **options)
    elif _is_open_clip_tower(model):  # CLIP, or a bare TextTransformer
        _extend_open_clip(model, new_length, **options)
    elif _is_open_clip_tower(getattr(model, "text", None)):  # CustomTextCLIP
        _extend_open_clip(model.text, new_length, **options)
        model.context_length = new_length
    elif isinstance(getattr(model, "text_model", None), nn.Module):  # CLIPModel, ...WithProjection
        _extend_hf(model.text_model, new_length, **options)
        _set_max_positions(getattr(model, "config", None), new_length)
    elif isinstance(getattr(model, "embeddings", None), nn.Module):  # CLIPTextModel, BERT-style
        _extend_hf(model, new_length, **options)
    else:
        raise TypeError(
            "extend_text_context supports open_clip CLIP/CustomTextCLIP/TextTransformer, "
            "transformers CLIPTextModel/CLIPModel, BERT-style encoders (BlipTextModel, BertModel) "
            f"and BlipTextEncoder; found {type(model).__name__}"
        )
    return model


def _is_open_clip_tower(module: Any) -> bool:
    return (
        isinstance(getattr(module, "positional_embedding", None), nn.Parameter)
        and hasattr(module, "attn_mask")
        and hasattr(module, "context_length")
    )


def _stretched_parameter(
    old: torch.Tensor, table: torch.Tensor, *, keep: int, train_new_only: bool
) -> nn.Parameter:
    param = nn.Parameter(table, requires_grad=old.requires_grad)
    if train_new_only and keep and param.requires_grad:
        freeze_leading_rows(param, keep)
    return param


def _extend_open_clip(
    tower: nn.Module, new_length: int, *, keep: int, train_new_only: bool
) -> None:
    old = tower.positional_embedding
    context = tower.context_length
    # A CoCa-style class token is appended after the text, so its row stays the last one.
    extra = old.shape[0] - context
    if extra not in (0, 1):
        raise ValueError(
            f"{type(tower).__name__}.positional_embedding has {old.shape[0]} rows for a context "
            f"of {context}; expected {context} (or {context + 1} with a class token)"
        )
    table = stretch_positional_embedding(old.detach()[:context], new_length, keep=keep)
    table = torch.cat([table, old.detach()[context:]])
    tower.positional_embedding = _stretched_parameter(
        old, table, keep=keep, train_new_only=train_new_only
    )
    mask = tower.attn_mask
    if mask is not None:
        size = new_length + extra
        tower.attn_mask = torch.full((size, size), float("-inf"), dtype=mask.dtype,
                                     device=mask.device).triu_(1)
    tower.context_length = new_length
    if hasattr(tower, "num_pos"):
        tower.num_pos = new_length + extra


def _extend_hf(model: nn.Module, new_length: int, *, keep: int, train_new_only: bool) -> None:
    embeddings = getattr(model, "embeddings", None)
    config = getattr(model, "config", None)
    bert_style = hasattr(embeddings, "position_embeddings")
    name = "position_embeddings" if bert_style else "position_embedding"
    table = getattr(embeddings, name, None)
    rows = getattr(config, "max_position_embeddings", None)
    if not isinstance(table, nn.Embedding) or rows != getattr(table, "num_embeddings", None):
        raise TypeError(
            f"{type(model).__name__}: expected embeddings.position_embedding(s) as an nn.Embedding "
            f"with config.max_position_embeddings rows; found {type(table).__name__} and {rows}"
        )
    kind = getattr(config, "position_embedding_type", "absolute")
    if kind != "absolute":
        raise ValueError(f"{type(model).__name__}: only absolute position embeddings stretch, "
                         f"found position_embedding_type={kind!r}")
    old = table.weight
    stretched = stretch_positional_embedding(old.detach(), new_length, keep=keep)
    table.weight = _stretched_parameter(old, stretched, keep=keep, train_new_only=train_new_only)
    table.num_embeddings = new_length
    position_ids = getattr(embeddings, "position_ids", None)
    if isinstance(position_ids, torch.Tensor):
        embeddings.position_ids = torch.arange(
            new_length, dtype=position_ids.dtype, device=position_ids.device
        ).expand((1, -1))
    token_type_ids = getattr(embeddings, "token_type_ids", None)
    if isinstance(token_type_ids, torch.Tensor):  # BERT's default all-zero segment ids
        embeddings.token_type_ids = token_type_ids.new_zeros((1, new_length))
    _set_max_positions(config, new_length)


def _set_max_positions(config: Any, new_length: int) -> None:
    """Record the new length in a text config, or in the ``text_config`` of a dual config."""
    text_config = getattr(config, "text_config", None) or config
    if hasattr(text_config, "max_position_embeddings"):
        text_config.max_position_embeddings = new_length
