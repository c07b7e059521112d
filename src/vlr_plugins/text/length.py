"""Text-length extension (Long-CLIP): a model's text encoder and its tokenizer at a longer context.

:func:`extend_text_context` stretches a model's positional table in place with
:func:`~vlr_plugins.text.positions.stretch_positional_embedding` (Long-CLIP's
knowledge-preserved stretching) and keeps the first rows fixed with
:func:`~vlr_plugins.text.positions.freeze_leading_rows`; :func:`tokenizer_for_length`
gives the tokenizer the same length.
"""

from __future__ import annotations

import copy
from typing import Any

from torch import nn

__all__ = ["extend_text_context", "tokenizer_for_length"]


def extend_text_context(
    model: nn.Module, new_length: int, *, keep: int = 20, train_new_only: bool = True
) -> nn.Module:
    """Give ``model``'s text encoder ``new_length`` positions, in place; returns ``model``.

    The positional table is stretched by
    :func:`~vlr_plugins.text.positions.stretch_positional_embedding`; the attention mask,
    position ids and recorded context length follow. Accepts

    * open_clip ``CLIP`` (``positional_embedding``, ``attn_mask``, ``context_length``),
      ``CustomTextCLIP`` and a bare ``TextTransformer`` (``text.positional_embedding``,
      ``text.attn_mask``, ``text.num_pos``, ``text.context_length``; a CoCa-style class
      token's row stays last);
    * transformers ``CLIPTextModel`` / ``CLIPTextModelWithProjection`` / ``CLIPModel``
      (``embeddings.position_embedding``, ``position_ids``, ``max_position_embeddings``);
    * BERT-style encoders with absolute positions -- ``BlipTextModel``, ``BertModel``,
      and :class:`~vlr_plugins.text.BlipTextEncoder` -- past 512 as well.

    ``train_new_only`` (Long-CLIP's recipe) keeps the first ``keep`` rows exactly as they
    are through training, weight decay included, with
    :func:`~vlr_plugins.text.positions.freeze_leading_rows`, if the table requires grad.
    The tokenizer must be extended too: :func:`tokenizer_for_length`.

    Example::

        model = open_clip.create_model("ViT-B-16", pretrained="openai")
        extend_text_context(model, 248)                     # Long-CLIP's 77 -> 248
        tokenizer = tokenizer_for_length("ViT-B-16", 248)
    """
    from vlr_plugins.text._extend import apply_extension

    return apply_extension(model, new_length, keep=keep, train_new_only=train_new_only)


def tokenizer_for_length(tokenizer_or_name: Any, new_length: int) -> Any:
    """A tokenizer that pads/truncates to ``new_length`` tokens; the original is left as is.

    * ``str``: an open_clip model name -> ``open_clip.get_tokenizer(name, context_length=...)``;
    * a transformers tokenizer -> a deep copy with ``model_max_length = new_length``
      (call it with ``truncation=True``);
    * an open_clip tokenizer (``SimpleTokenizer``, its ``HFTokenizer``...) -> a shallow
      copy with ``context_length = new_length``.

    A model does not know its tokenizer, so pass the tokenizer or the model's name.
    """
    if isinstance(tokenizer_or_name, str):
        import open_clip

        return open_clip.get_tokenizer(tokenizer_or_name, context_length=new_length)
    if hasattr(tokenizer_or_name, "model_max_length"):
        tokenizer = copy.deepcopy(tokenizer_or_name)
        tokenizer.model_max_length = new_length
        return tokenizer
    if hasattr(tokenizer_or_name, "context_length"):
        tokenizer = copy.copy(tokenizer_or_name)
        tokenizer.context_length = new_length
        return tokenizer
    raise TypeError(
        "expected an open_clip model name, a transformers tokenizer (model_max_length) or an "
        f"open_clip tokenizer (context_length), found {type(tokenizer_or_name).__name__}"
    )
