"""Length-sorted batches: items of similar length together, so a batch pays for its own longest.

A left-padded batch costs ``rows x its longest`` tokens. Cut a call's items in their given
order and a batch of short sentences pays for the one long caption among them;
:func:`length_batches` sorts the items by length, longest first, and cuts the sorted run
into batches of at most ``batch_size`` items and ``max_tokens`` padded tokens, so each
batch holds items of about one length and short items fill larger batches. The caller
computes each batch and puts the results back in its own order (:func:`in_input_order`).

Reference: sentence-transformers' ``SentenceTransformer.encode`` (sort by length, longest
first, then restore the order); vLLM's ``max_num_batched_tokens`` (a token budget per
step rather than a count).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

__all__ = ["check_batch_limits", "check_max_padding", "in_input_order", "length_batches"]

T = TypeVar("T")


def check_batch_limits(batch_size: int | None, max_tokens: int | None, where: str,
                       names: tuple[str, str] = ("batch_size", "max_batch_tokens")) -> None:
    """Each limit is ``None`` or an integer >= 1; else a ``ValueError`` naming ``where``."""
    for name, value in zip(names, (batch_size, max_tokens)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{where}: {name} must be an integer >= 1 or None (no limit), found {value!r}")


def check_max_padding(max_padding: float | None, where: str) -> None:
    """``max_padding`` is ``None`` or a number in [0, 1); else a ``ValueError`` naming ``where``."""
    if max_padding is not None and (isinstance(max_padding, bool) or not isinstance(max_padding, (int, float))
                                    or not 0 <= max_padding < 1):
        raise ValueError(f"{where}: max_padding must be a fraction in [0, 1) or None (no limit), found {max_padding!r}")


def length_batches(lengths: Sequence[int], *, batch_size: int | None = None, max_tokens: int | None = None,
                   max_padding: float | None = None) -> list[list[int]]:
    """The indices of ``lengths`` in batches: sorted by length, longest first (ties in input
    order), each batch at most ``batch_size`` items, at most ``max_tokens`` padded tokens
    (``items x the batch's longest``; an item longer than ``max_tokens`` is a batch of its
    own) and at most a ``max_padding`` share of padding (``1 - real tokens / padded tokens``:
    where lengths spread, as in a small call of queries beside paragraphs, a batch stops
    before its padding costs more than batching saves). ``None``: no limit of that kind.
    Every index appears once.

    Example::

        >>> length_batches([5, 40, 6, 38, 7], batch_size=2)
        [[1, 3], [4, 2], [0]]
        >>> length_batches([5, 40, 6, 38, 7], max_tokens=80)
        [[1, 3], [4, 2, 0]]
        >>> length_batches([5, 40, 6, 38, 7], max_padding=0.25)
        [[1, 3], [4, 2, 0]]
    """
    check_batch_limits(batch_size, max_tokens, "length_batches", ("batch_size", "max_tokens"))
    check_max_padding(max_padding, "length_batches")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    real = 0  # the current batch's real tokens
    for i in order:
        current = batches[-1] if batches else None
        # sorted longest first, so a batch's first item is its longest
        padded = None if current is None else (len(current) + 1) * max(lengths[current[0]], 1)
        full = current is None or (batch_size is not None and len(current) >= batch_size) or (
            max_tokens is not None and padded > max_tokens) or (
            max_padding is not None and padded - real - lengths[i] > max_padding * padded)
        if full:
            batches.append([i])
            real = lengths[i]
        else:
            current.append(i)
            real += lengths[i]
    return batches


def in_input_order(batches: Sequence[Sequence[int]], results: Sequence[Sequence[T]]) -> list[T]:
    """``results[b][k]``, the result of item ``batches[b][k]``, as one list in the items' order."""
    out: dict[int, T] = {}
    for batch, result in zip(batches, results, strict=True):
        if len(batch) != len(result):
            raise ValueError(f"in_input_order: a batch of {len(batch)} items gave {len(result)} results")
        out.update(zip(batch, result))
    return [out[i] for i in range(len(out))]
