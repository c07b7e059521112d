"""The one distributed gather helper shared by every loss of :mod:`vlr_plugins.losses`.

Contrastive losses are computed on the *global* batch: every rank gathers the
embeddings of all ranks (with gradient) and computes the same full loss, as
open_clip's ``ClipLoss(local_loss=False, gather_with_grad=True)`` does. Unlike
open_clip, ranks may hold different numbers of rows (images with several captions,
a variable number of hard negatives), so sizes are exchanged first and rows are
padded to the largest rank before the collective.

Every function here is a no-op on a single process (``torch.distributed`` missing,
not initialised, or a world of one), so the losses run unchanged without it.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

__all__ = ["should_gather", "gather_rows_with_grad", "gather_owners"]


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
