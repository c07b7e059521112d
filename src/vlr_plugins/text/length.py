"""Text-length extension: Long-CLIP's knowledge-preserved stretching of positional embeddings.

A text encoder trained on 77 (CLIP) or 512 (BERT/BLIP) positions gets a longer context by
stretching its positional-embedding table: the first rows, which carry most of what the
model learnt about short captions, stay as they are; the rest are spread over the new
length by linear interpolation. Long-CLIP (Zhang et al., ECCV 2024, "Long-CLIP: Unlocking
the Long-Text Capability of CLIP", sec. 3.1) keeps 20 rows and stretches 77 -> 248 by 4x;
:func:`stretch_positional_embedding` is that construction for any target length, and
:func:`extend_text_context` applies it to a model in place.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

__all__ = [
    "extend_text_context",
    "freeze_leading_rows",
    "frozen_rows_param_groups",
    "stretch_positional_embedding",
    "tokenizer_for_length",
]


def stretch_positional_embedding(
    pos: torch.Tensor, new_length: int, *, keep: int = 20
) -> torch.Tensor:
    """pos: (L, D) -> (new_length, D), the first ``keep`` rows kept and the rest stretched.

    With ``T = new_length`` and ``k = keep``, row ``r`` of the result is

    * ``pos[r]`` for ``r < k``;
    * for ``r >= k``, ``pos`` read at the source position ``p(r) = k + (r - k)(L - k)/(T - k)``,
      i.e. the ``L - k`` rows after the kept ones are spread by the factor
      ``s = (T - k)/(L - k)`` (integer or not: every old row owns ``s`` new rows). With
      ``i = floor(p)`` and ``f = p - i`` (computed exactly from integers):

      - ``(1 - f) pos[i] + f pos[i + 1]`` when ``i < L - 1`` (interpolation between neighbours),
      - ``pos[L-1] + f (pos[L-1] - pos[L-2])`` when ``i = L - 1`` (the tail, extrapolated
        from the last two rows; ``p < L`` always, so by less than one old step).

    At 77 -> 248 with ``k = 20``, ``s = 228/57 = 4``: row ``20 + 4i + j`` is
    ``(4-j)/4 pos[20+i] + j/4 pos[21+i]`` and rows 244..247 are
    ``pos[76] + j/4 (pos[76] - pos[75])`` -- Long-CLIP's ``load_from_clip`` construction,
    bit for bit in float32. ``p`` is strictly increasing, and a table linear in its row
    index stays linear. Half-precision tables are computed in float32 and cast back.

    Only lengthens: raises ``ValueError`` unless ``L >= 2``, ``0 <= keep < L < new_length``.

    Example::

        >>> long = stretch_positional_embedding(torch.randn(77, 512), 248, keep=20)
        >>> long.shape
        torch.Size([248, 512])
    """
    if pos.dim() != 2:
        raise ValueError(f"expected a (L, D) positional embedding, found shape {tuple(pos.shape)}")
    length = pos.shape[0]
    if length < 2:
        raise ValueError(f"stretching needs at least 2 rows to extrapolate from, found {length}")
    if not 0 <= keep < length:
        raise ValueError(
            f"keep must be in [0, {length}) for a table of {length} rows, found {keep}"
        )
    if new_length <= length:
        raise ValueError(
            f"new_length must exceed the current {length} positions (this only lengthens), "
            f"found {new_length}"
        )
    work = pos if pos.dtype in (torch.float32, torch.float64) else pos.float()
    span = new_length - keep
    offset = torch.arange(span, device=pos.device) * (length - keep)
    left = keep + torch.div(offset, span, rounding_mode="floor")
    frac = ((offset % span).to(torch.float64) / span).to(work.dtype).unsqueeze(1)
    inner = left < length - 1
    right = torch.where(inner, left + 1, left)
    interpolated = (1 - frac) * work[left] + frac * work[right]
    step = work[length - 1] - work[length - 2]
    extrapolated = work[length - 1] + frac * step
    stretched = torch.where(inner.unsqueeze(1), interpolated, extrapolated)
    return torch.cat([work[:keep], stretched]).to(pos.dtype)


class _ZeroLeadingRows:
    """Gradient hook: zeroes rows ``[:rows]`` (a class, not a lambda, so models still pickle)."""

    def __init__(self, rows: int) -> None:
        self.rows = rows

    def __call__(self, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        grad[: self.rows] = 0
        return grad


def freeze_leading_rows(param: nn.Parameter, rows: int) -> nn.Parameter:
    """Keep rows ``[:rows]`` of ``param`` out of training (Long-CLIP's frozen positions).

    Registers a gradient hook that zeroes their gradient and tags ``param.frozen_rows``.
    A zero gradient stops SGD (with or without momentum) and Adam from moving them, but
    **not weight decay**, which acts on the weights directly: build the optimizer from
    :func:`frozen_rows_param_groups`, or otherwise give this parameter ``weight_decay=0``.
    Hooks live on the ``Parameter`` object: ``model.to(...)`` keeps them, while
    ``copy.deepcopy`` and ``torch.save``/``torch.load`` of a whole module drop them (and
    a model rebuilt at the new length starts without them), so call this again there.
    Calling it twice updates the existing hook. ``param`` must require grad.
    """
    if not param.requires_grad:
        raise ValueError("cannot freeze rows of a parameter that does not require grad")
    for hook in (getattr(param, "_backward_hooks", None) or {}).values():
        if isinstance(hook, _ZeroLeadingRows):
            hook.rows = rows
            break
    else:
        param.register_hook(_ZeroLeadingRows(rows))
    param.frozen_rows = rows
    return param


def frozen_rows_param_groups(params: nn.Module | Iterable[Any]) -> list[dict[str, Any]]:
    """Optimizer param groups in which every parameter with frozen rows has ``weight_decay=0``.

    ``params``: a module, an iterable of parameters, or an iterable of param-group dicts
    (what you would hand the optimizer). Each group loses its parameters tagged by
    :func:`freeze_leading_rows`, which move to a copy of that group with
    ``weight_decay=0.0``; other options (``lr``, ...) carry over, empty groups are dropped.

    Long-CLIP keeps its 20 rows exactly fixed under AdamW(weight_decay=1e-2) by holding
    them in a separate ``requires_grad=False`` tensor and training only the stretched
    copy, which is decayed. A single table cannot be decayed row by row, so here the whole
    positional table goes undecayed -- what open_clip's own ``no_weight_decay()`` already
    asks of timm optimizers for ``positional_embedding``.

    Example::

        opt = torch.optim.AdamW(frozen_rows_param_groups(model), lr=1e-5, weight_decay=0.01)
    """
    if isinstance(params, nn.Module):
        params = params.parameters()
    groups = list(params)
    if not groups:
        return []
    if not isinstance(groups[0], dict):
        groups = [{"params": groups}]
    result: list[dict[str, Any]] = []
    for group in groups:
        members = group["params"]
        members = [members] if isinstance(members, torch.Tensor) else list(members)
        frozen = [p for p in members if getattr(p, "frozen_rows", 0)]
        rest = [p for p in members if not getattr(p, "frozen_rows", 0)]
        if rest:
            result.append({**group, "params": rest})
        if frozen:
            result.append({**group, "params": frozen, "weight_decay": 0.0})
    return result


def extend_text_context(
    model: nn.Module, new_length: int, *, keep: int = 20, train_new_only: bool = True
) -> nn.Module:
    """Give ``model``'s text encoder ``new_length`` positions, in place; returns ``model``.

    The positional table is stretched by :func:`stretch_positional_embedding`; the
    attention mask, position ids and recorded context length follow. Accepts

    * open_clip ``CLIP`` (``positional_embedding``, ``attn_mask``, ``context_length``),
      ``CustomTextCLIP`` and a bare ``TextTransformer`` (``text.positional_embedding``,
      ``text.attn_mask``, ``text.num_pos``, ``text.context_length``; a CoCa-style class
      token's row stays last);
    * transformers ``CLIPTextModel`` / ``CLIPTextModelWithProjection`` / ``CLIPModel``
      (``embeddings.position_embedding``, ``position_ids``, ``max_position_embeddings``);
    * BERT-style encoders with absolute positions -- ``BlipTextModel``, ``BertModel``,
      and :class:`~vlr_plugins.text.BlipTextEncoder` -- past 512 as well.

    ``train_new_only`` (Long-CLIP's recipe) freezes the first ``keep`` rows with
    :func:`freeze_leading_rows`, if the table requires grad; mind weight decay there. The
    tokenizer must be extended too: :func:`tokenizer_for_length`.

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
