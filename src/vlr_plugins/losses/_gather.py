"""The one distributed gather helper shared by every loss of :mod:`vlr_plugins.losses`.

Contrastive losses are computed on the *global* batch: every rank gathers the
embeddings of all ranks (with gradient) and computes the same full loss, as
open_clip's ``ClipLoss(local_loss=False, gather_with_grad=True)`` does. Unlike
open_clip, ranks may hold different numbers of rows (images with several captions,
a variable number of hard negatives), so sizes are exchanged first and rows are
padded to the largest rank before the collective. A loss that needs only a few rows
of the global batch (the hard negatives of video-text matching, whose tokens are too
large to gather whole) fetches just those rows with :func:`gather_rows_at`.

Every function here is a no-op on a single process (``torch.distributed`` missing,
not initialised, or a world of one), so the losses run unchanged without it.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

__all__ = [
    "should_gather",
    "gather_sizes",
    "gather_rows_with_grad",
    "gather_rows_at",
    "gather_owners",
]


def _world_size() -> int:
    """World size of the default group; 1 when torch.distributed is unusable."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return 1


def should_gather(gather: bool | None) -> bool:
    """Resolve a loss's ``gather`` argument.

    ``None`` (auto) gathers iff ``torch.distributed`` is initialised with more than
    one process; ``True`` / ``False`` are returned as given (gathering on a single
    process is a no-op anyway).
    """
    if gather is None:
        return _world_size() > 1
    return bool(gather)


def _gather_sizes(n: int, device: torch.device) -> list[int]:
    """First-dimension size of the tensor on every rank, in rank order."""
    import torch.distributed as dist

    world = dist.get_world_size()
    # NCCL only moves CUDA tensors, so the sizes travel on the data's device.
    local = torch.tensor([n], dtype=torch.long, device=device)
    sizes = [torch.zeros_like(local) for _ in range(world)]
    dist.all_gather(sizes, local)
    return [int(s.item()) for s in sizes]


def gather_sizes(n: int, device: torch.device | str = "cpu") -> list[int]:
    """``n`` of every rank, in rank order (e.g. row counts, sequence lengths); ``[n]`` on a
    single process. Every rank must call this collectively; ``device`` is where the
    collective runs (the data's device: NCCL only moves CUDA tensors)."""
    if _world_size() == 1:
        return [n]
    return _gather_sizes(n, torch.device(device))


def _pad_rows(x: Tensor, rows: int) -> Tensor:
    if x.shape[0] == rows:
        return x
    return torch.cat([x, x.new_zeros((rows - x.shape[0], *x.shape[1:]))], dim=0)


def _gather_padded(x: Tensor, with_grad: bool) -> tuple[Tensor, list[int]]:
    """Rows of ``x`` from all ranks, concatenated in rank order, and each rank's count."""
    import torch.distributed as dist

    sizes = _gather_sizes(x.shape[0], x.device)
    largest = max(sizes)
    if largest == 0:
        # nothing on any rank; gloo rejects zero-sized collectives
        return x, sizes
    padded = _pad_rows(x, largest).contiguous()
    if with_grad:
        import torch.distributed.nn.functional as dist_fn

        # torch >= 2.10 marks this autograd all_gather deprecated in favour of the
        # private torch.distributed._functional_collectives; it is still the public,
        # backend-agnostic one (its backward sums gradients over ranks, via all-to-all
        # on gloo), so keep it and keep its once-per-call FutureWarning out of logs.
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore",
                message=r"torch\.distributed\.nn\.functional\.all_gather is deprecated",
                category=FutureWarning,
            )
            parts = dist_fn.all_gather(padded)
    else:
        parts = [torch.empty_like(padded) for _ in sizes]
        dist.all_gather(parts, padded)
    return torch.cat([p[:n] for p, n in zip(parts, sizes)], dim=0), sizes


def gather_rows_with_grad(x: Tensor) -> Tensor:
    """Concatenate ``x`` from all ranks in rank order, keeping the autograd graph.

    Args:
        x: ``(n_r, ...)`` on rank ``r``; ``n_r`` may differ between ranks, the
            trailing dimensions, dtype and device may not.

    Returns:
        ``(sum_r n_r, ...)`` when ``torch.distributed`` is initialised with more
        than one process, otherwise ``x`` itself. Every rank must call this
        collectively, in the same order.

    Gradients flowing into the result are summed over ranks on the way back
    (``all_gather``'s backward), so when every rank computes the same global loss,
    each rank's ``x.grad`` is ``world_size`` times the gradient of that loss; the
    usual DDP gradient averaging over ranks turns this back into the full gradient.
    """
    if _world_size() == 1:
        return x
    return _gather_padded(x, with_grad=True)[0]


def gather_rows_at(x: Tensor, index: Tensor) -> Tensor:
    """Rows ``index`` of the global batch (all ranks' ``x`` concatenated in rank order),
    keeping the autograd graph, without gathering the whole batch.

    Args:
        x: ``(n_r, ...)`` on rank ``r``; ``n_r`` may differ between ranks, the trailing
            dimensions, dtype and device may not.
        index: ``(k_r,)`` integer indices into the global batch ``0 .. sum_r n_r - 1``;
            each rank asks for its own rows, any number, repeats allowed.

    Returns:
        ``(k_r, ...)``: ``concat_r(x)[index]``; on a single process ``x[index]``. Every
        rank must call this collectively, in the same order.

    Only the requested rows travel (two ``all_to_all`` exchanges: the indices, then the
    rows), so fetching e.g. one hard-negative video per caption costs one video's tokens
    per caption instead of the whole global batch of tokens that
    :func:`gather_rows_with_grad` would move. On the way back each row's gradient returns
    to the rank that holds it (summed over every rank that asked for it); the DDP scaling
    is that of :func:`gather_rows_with_grad` when every rank returns the global loss.
    """
    index = index.long()
    if _world_size() == 1:
        return x[index]
    return _RowsAt.apply(x, index)


class _RowsAt(torch.autograd.Function):
    """Autograd all-to-all behind :func:`gather_rows_at`."""

    @staticmethod
    def forward(ctx, x: Tensor, index: Tensor) -> Tensor:  # type: ignore[override]
        import torch.distributed as dist

        sizes = torch.tensor(_gather_sizes(x.shape[0], x.device), device=x.device)
        ends = torch.cumsum(sizes, dim=0)
        if bool(((index < 0) | (index >= ends[-1])).any()):
            raise IndexError(f"gather_rows_at: index must lie in 0 .. {int(ends[-1]) - 1} (the "
                             f"global batch); found {index.min().item()} .. {index.max().item()}")
        holder = torch.searchsorted(ends, index, right=True)  # the rank holding each row
        order = torch.argsort(holder, stable=True)
        asked = torch.bincount(holder, minlength=len(sizes))  # rows this rank asks of each rank
        served = torch.empty_like(asked)  # rows each rank asks of this rank
        dist.all_to_all_single(served, asked)
        asked_split, served_split = asked.tolist(), served.tolist()
        wanted = (index - (ends - sizes)[holder])[order]  # local indices on the holder
        to_serve = wanted.new_empty(sum(served_split))
        dist.all_to_all_single(to_serve, wanted, output_split_sizes=served_split,
                               input_split_sizes=asked_split)
        rows = x.new_empty((index.shape[0], *x.shape[1:]))
        dist.all_to_all_single(rows, x[to_serve].contiguous(), output_split_sizes=asked_split,
                               input_split_sizes=served_split)
        out = torch.empty_like(rows)
        out[order] = rows
        ctx.save_for_backward(to_serve, order)
        ctx.splits = (asked_split, served_split)
        ctx.rows = x.shape[0]
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        import torch.distributed as dist

        to_serve, order = ctx.saved_tensors
        asked_split, served_split = ctx.splits
        back = grad.new_empty((to_serve.shape[0], *grad.shape[1:]))
        dist.all_to_all_single(back, grad[order].contiguous(), output_split_sizes=served_split,
                               input_split_sizes=asked_split)
        grad_x = grad.new_zeros((ctx.rows, *grad.shape[1:]))
        return grad_x.index_add_(0, to_serve, back), None


def gather_owners(owner: Tensor, num_local_items: int) -> tuple[Tensor, Tensor]:
    """Gather owner indices from all ranks, re-indexed into the global batch.

    Args:
        owner: ``(n_r,)`` integer indices into this rank's ``num_local_items``
            items (e.g. the image each caption or hard negative belongs to).
        num_local_items: number of items (images) on this rank.

    Returns:
        ``(global_owner, offsets)``: ``global_owner`` ``(sum_r n_r,)`` long, rank
        ``r``'s indices shifted by the number of items on ranks ``< r``; ``offsets``
        ``(world_size,)`` long, the global index of each rank's first item. On a
        single process: ``(owner.long(), tensor([0]))``. No gradient flows (indices).
    """
    owner = owner.long()
    if _world_size() == 1:
        return owner, torch.zeros(1, dtype=torch.long, device=owner.device)
    counts = torch.tensor(_gather_sizes(num_local_items, owner.device), device=owner.device)
    offsets = torch.cumsum(counts, dim=0) - counts
    gathered, sizes = _gather_padded(owner, with_grad=False)
    shift = torch.repeat_interleave(offsets, torch.tensor(sizes, device=owner.device))
    return gathered + shift, offsets
