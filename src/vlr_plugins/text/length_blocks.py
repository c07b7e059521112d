"""Length-grouped text encoding: a batch of short and long texts in blocks of similar length.

A collate pads every text of a batch to the longest one, so a paragraph-supervision
batch (captions of ~20 tokens beside paragraphs of ~128) spends most of its text
encoder on padding. :func:`encode_in_length_blocks` sorts the rows by length, splits
them into a few blocks where that saves the most padded tokens
(:func:`length_block_bounds`), cuts each block's columns to its own longest row, encodes
the blocks and returns the embeddings in the batch's order, with autograd intact.

The embeddings are those of one block (to float rounding) for encoders whose rows do not
interact and whose output for a row does not depend on padding after it: BERT-style
encoders with absolute positions and an attention mask (``BlipTextEncoder``, extended or
not, and ``DualCLSTextEncoder``). open_clip's ``CLIP.encode_text`` adds its whole
positional table and so needs its full context width: it is not one of them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable

import torch
from torch import Tensor, nn

from vlr_plugins.losses.gradcache import cached_encode

__all__ = ["encode_in_length_blocks", "length_block_bounds", "check_length_blocks"]

_WHERE = "encode_in_length_blocks"
_warned_padding = False


def check_length_blocks(where: str, blocks: int, name: str = "length_blocks") -> None:
    """``blocks`` is an integer >= 1; else a ``ValueError`` naming ``where`` and ``name``."""
    if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1:
        raise ValueError(f"{where}: {name} must be an integer >= 1 (1: every text of a batch in one "
                         f"padded block); found {blocks!r}")


def length_block_bounds(sorted_lengths: Tensor | Iterable[int], blocks: int) -> list[int]:
    """Where to cut rows sorted by length into at most ``blocks`` contiguous blocks so that
    the padded tokens, ``sum(rows in block * longest in block)``, are fewest.

    Expects ``sorted_lengths`` ``(N,)`` non-decreasing. Returns the blocks' end indices,
    increasing, the last ``N`` (``[]`` for no rows). Exact: a dynamic programme over the
    distinct lengths (a cut inside a run of equal lengths never saves a token), O(blocks
    x distinct^2). Of equally cheap layouts it returns one with the fewest blocks, so a
    batch whose texts share one length stays one block.

    Example:
        >>> length_block_bounds([20, 21, 22, 120, 128], 2)
        [3, 5]
        >>> length_block_bounds([77, 77, 77], 4)
        [3]
    """
    check_length_blocks("length_block_bounds", blocks, "blocks")
    lengths = torch.as_tensor(sorted_lengths, dtype=torch.float64).flatten()
    if lengths.numel() == 0:
        return []
    if bool((lengths[1:] < lengths[:-1]).any()):
        raise ValueError("length_block_bounds: sorted_lengths must be sorted (non-decreasing)")
    values, counts = torch.unique_consecutive(lengths, return_counts=True)
    ends = counts.cumsum(0).to(torch.float64)  # rows up to and including each distinct length
    m = values.numel()
    k = min(blocks, m)
    # cost[j]: fewest padded tokens for the rows up to distinct value j in b blocks; a block
    # over distinct values [i, j] costs (ends[j] - start[i]) * values[j], start[i] being the
    # rows shorter than values[i]
    cost = ends * values
    choices: list[Tensor] = []
    best_cost, best_b = float(cost[-1]), 1
    start = torch.cat([torch.zeros(1, dtype=torch.float64), ends[:-1]])  # ends[i - 1]; 0 for i = 0
    valid = torch.arange(m)[None, :] <= torch.arange(m)[:, None]  # the last block [i, j] is not empty
    for b in range(2, k + 1):
        # last block over distinct values [i, j]: previous blocks end at i - 1
        prev = torch.cat([torch.full((1,), float("inf"), dtype=torch.float64), cost[:-1]])  # cost[i - 1]
        total = prev[None, :] + (ends[:, None] - start[None, :]) * values[:, None]
        total = total.masked_fill(~valid, float("inf"))
        cost, arg = total.min(dim=1)
        choices.append(arg)
        if float(cost[-1]) < best_cost:
            best_cost, best_b = float(cost[-1]), b
    bounds, j = [int(ends[-1])], m - 1
    for b in range(best_b, 1, -1):
        i = int(choices[b - 2][j])  # the last block starts at distinct value i
        bounds.append(int(start[i]))
        j = i - 1
    return bounds[::-1]


def _right_padded_lengths(attention_mask: Tensor) -> Tensor | None:
    """Each row's token count, or ``None`` when some row is not ones then zeros."""
    kept = attention_mask != 0
    lengths = kept.sum(1)
    expected = torch.arange(kept.shape[1], device=kept.device)[None, :] < lengths[:, None]
    return lengths if bool((kept == expected).all()) else None


def _trimmed(encode_fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``encode_fn`` on its rows cut to their longest (``input_ids``, ``attention_mask`` first)."""

    def encode(input_ids: Tensor, attention_mask: Tensor, *rows: Tensor) -> Tensor:
        width = max(1, int((attention_mask != 0).sum(1).max()))
        return encode_fn(input_ids[:, :width], attention_mask[:, :width], *rows)

    return encode


def encode_in_length_blocks(
    encode_fn: Callable[..., Tensor],
    input_ids: Tensor,
    attention_mask: Tensor,
    *row_inputs: Tensor,
    blocks: int,
    chunk_size: int | None = None,
    parameters: nn.Module | Iterable[Tensor] = (),
) -> Tensor:
    """``encode_fn(input_ids, attention_mask, *row_inputs)`` with the rows encoded in blocks
    of similar length, each block cut to its own longest text.

    Expects:
        encode_fn: maps ``(n, L')`` token ids and mask (and row slices of ``row_inputs``) to
            ``(n, D)`` embeddings; rows must not interact, and a row's embedding must not
            depend on the padding after it (see the module docstring).
        input_ids, attention_mask: ``(N, L)``, right-padded (each mask row ones, then zeros).
        row_inputs: more ``(N, ...)`` tensors cut by row, not by column (``view_ids``).
        blocks: at most this many blocks (:func:`length_block_bounds`); 1 = one plain call.
        chunk_size, parameters: gradient caching (:func:`~vlr_plugins.losses.cached_encode`).
            With a ``chunk_size`` below ``N`` the chunks are the blocks: the rows are sorted
            by length, so each chunk holds texts of similar length, and each chunk is cut to
            its own longest; ``blocks`` > 1 only switches this on.

    Returns ``(N, D)`` in the order of the input rows. Gradients reach the encoder as from
    one call (the blocks' outputs are put back in order by an index, which autograd
    follows); with caching, as :func:`~vlr_plugins.losses.cached_encode` gives them (each
    chunk's dropout replayed). A mask that is not right-padded (left padding) cannot be
    cut at the right: the batch is then encoded as with ``blocks=1`` (warned once per
    process).

    Reference: length-grouped batching, e.g. ``group_by_length`` of transformers'
    ``Trainer``; here the grouping is inside one contrastive batch, which must stay whole.

    Relations: ``blocks=1`` is ``cached_encode(encode_fn, input_ids, attention_mask,
    *row_inputs, chunk_size=..., parameters=...)``, what the trainers did before.

    Example:
        >>> import torch
        >>> from vlr_plugins.text import encode_in_length_blocks
        >>> table = torch.nn.EmbeddingBag(50, 8, mode="sum")
        >>> encode = lambda ids, mask: table(ids, per_sample_weights=mask.float())
        >>> ids = torch.randint(1, 50, (4, 10))
        >>> mask = torch.tensor([[1] * 10, [1] * 3 + [0] * 7, [1] * 9 + [0], [1] * 2 + [0] * 8])
        >>> emb = encode_in_length_blocks(encode, ids, mask, blocks=2)
        >>> torch.allclose(emb, encode(ids, mask))
        True
    """
    check_length_blocks(_WHERE, blocks, "blocks")
    inputs = (input_ids, attention_mask, *row_inputs)
    if blocks == 1 or input_ids.ndim != 2 or attention_mask.shape != input_ids.shape or not len(input_ids):
        return cached_encode(encode_fn, *inputs, chunk_size=chunk_size, parameters=parameters)
    lengths = _right_padded_lengths(attention_mask)
    if lengths is None:
        _warn_not_right_padded()
        return cached_encode(encode_fn, *inputs, chunk_size=chunk_size, parameters=parameters)
    order = torch.argsort(lengths, stable=True)
    restore = torch.argsort(order)
    sorted_inputs = [x[order] for x in inputs]
    if chunk_size is not None and input_ids.shape[0] > chunk_size:
        out = cached_encode(_trimmed(encode_fn), *sorted_inputs, chunk_size=chunk_size, parameters=parameters)
        return out[restore]
    bounds = length_block_bounds(lengths[order].cpu(), blocks)
    if len(bounds) == 1 and int(lengths.max()) == input_ids.shape[1]:
        return encode_fn(*inputs)  # one block, nothing to cut: the plain call
    trimmed = _trimmed(encode_fn)
    outs, begin = [], 0
    for end in bounds:
        outs.append(trimmed(*(x[begin:end] for x in sorted_inputs)))
        begin = end
    return torch.cat(outs)[restore]


def _warn_not_right_padded() -> None:
    global _warned_padding
    if not _warned_padding:
        _warned_padding = True
        warnings.warn(
            f"{_WHERE}: the attention mask is not right-padded (a row is not ones then zeros: left "
            f"padding?), so the texts cannot be cut to their own length; encoding the batch in one "
            f"block (length_blocks: 1). (Warned once per process.)",
            UserWarning,
            stacklevel=3,
        )
