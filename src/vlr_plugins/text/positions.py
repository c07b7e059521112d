"""Positional tables: Long-CLIP's knowledge-preserved stretching, and rows kept fixed in training.

A text encoder trained on 77 (CLIP) or 512 (BERT/BLIP) positions gets a longer context by
stretching its positional-embedding table: the first rows, which carry most of what the
model learnt about short captions, stay as they are; the rest are spread over the new
length by linear interpolation (:func:`stretch_positional_embedding`). Long-CLIP (Zhang et
al., ECCV 2024, "Long-CLIP: Unlocking the Long-Text Capability of CLIP", sec. 3.1) keeps
20 rows, stretches 77 -> 248 by 4x, and trains only the stretched rows
(:func:`freeze_leading_rows`).

A leaf: imports nothing of vlr_plugins (:mod:`~vlr_plugins.text.length` and the model
appliers build on it).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["stretch_positional_embedding", "freeze_leading_rows"]

# step hooks of every torch optimizer, registered by the first freeze_leading_rows call
_step_hooks: tuple[Any, Any] | None = None


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
    """Keep rows ``[:rows]`` of ``param`` exactly as they are through training (Long-CLIP's
    frozen positions); returns ``param``.

    Long-CLIP holds its 20 kept rows in a separate tensor that does not require grad. A
    single table cannot be split that way, so here:

    * their gradient is zeroed (a gradient hook), so they count in no gradient norm (clipping)
      and no optimizer statistics, as if they did not require grad; and
    * after every step of any ``torch.optim.Optimizer`` that holds ``param``, they are copied
      back from the values they had before its first step (optimizer step hooks, registered
      for the whole process on the first call). A zero gradient alone does not stop weight
      decay -- decoupled AdamW decays rows without gradient, and open_clip_train decays
      every 2-D weight -- so the copy is what keeps them bit-identical, whatever the
      optimizer, its param groups or its weight decay.

    Nothing else is needed in any trainer that steps a torch optimizer: a plain loop,
    MMEngine's ``OptimWrapper``, open_clip_train, LAVIS. The kept values are those ``param``
    holds at the first step that includes it, so a checkpoint loaded before training
    (resumed or not) is what stays. ``param.frozen_rows`` records ``rows``; calling this
    again sets the new count (and the values kept are taken again at the next step).
    ``model.to(...)`` keeps the parameter and so its freezing; ``copy.deepcopy`` drops the
    tag and the hook (and a model rebuilt at the new length starts without them), so call
    this again there. ``param`` must require grad.

    Example::

        >>> table = nn.Parameter(torch.randn(8, 4))
        >>> before = table.detach().clone()
        >>> opt = torch.optim.AdamW([freeze_leading_rows(table, 3)], lr=0.1, weight_decay=0.5)
        >>> (table**2).sum().backward()
        >>> opt.step()
        >>> torch.equal(table[:3], before[:3]), torch.equal(table[3:], before[3:])
        (True, False)
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
    param.__dict__.pop("_kept_rows", None)
    _register_step_hooks()
    return param


def _register_step_hooks() -> None:
    global _step_hooks
    if _step_hooks is None:
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        _step_hooks = (
            register_optimizer_step_pre_hook(_remember_kept_rows),
            register_optimizer_step_post_hook(_restore_kept_rows),
        )


def _frozen(optimizer: torch.optim.Optimizer) -> list[nn.Parameter]:
    return [p for group in optimizer.param_groups for p in group["params"]
            if getattr(p, "frozen_rows", 0)]


def _remember_kept_rows(optimizer: torch.optim.Optimizer, *_: Any) -> None:
    for p in _frozen(optimizer):
        if "_kept_rows" not in p.__dict__:
            p._kept_rows = p.detach()[: p.frozen_rows].clone()


def _restore_kept_rows(optimizer: torch.optim.Optimizer, *_: Any) -> None:
    with torch.no_grad():
        for p in _frozen(optimizer):
            p[: p.frozen_rows].copy_(p._kept_rows)
