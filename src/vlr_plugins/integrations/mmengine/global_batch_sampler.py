"""MMEngine's ``DefaultSampler`` dealing each global batch out in contiguous slices, so that
the batch the processes gather is the one-process batch in the one-process order.

``DefaultSampler`` deals its seeded permutation round-robin (rank ``r`` takes positions
``r, r + W, ...``): global batch ``i`` holds the one-process batch's samples, in another
order. A loss that only sums over the batch (InfoNCE) does not see the order; one that
draws per row of the gathered batch (VTM's hard negatives: one ``multinomial`` per caption
over the gathered similarities) does, so with round-robin dealing two processes draw other
negatives than one process even from the same generator.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized

import torch
from mmengine.dataset import DefaultSampler

from vlr_plugins.integrations.mmengine.registry import DATA_SAMPLERS

__all__ = ["GlobalBatchSampler"]


@DATA_SAMPLERS.register_module()
class GlobalBatchSampler(DefaultSampler):
    """``DefaultSampler`` (the same seeded permutation of ``seed + epoch``, the same rounding
    up to a multiple of the world size) where each process takes, of every run of
    ``batch_size x world_size`` positions, its own ``batch_size`` consecutive ones: rank
    ``r``'s ``k``-th batch is positions ``k B W + r B ... k B W + (r + 1) B - 1``. Gathered
    rank by rank (``all_gather``), batch ``k`` of every process is batch ``k`` of one process
    with ``B W`` samples, in its order. A last, shorter run is split in equal contiguous
    parts the same way. One process: ``DefaultSampler``'s order.

    Args:
        dataset, shuffle, seed, round_up: ``DefaultSampler``'s.
        batch_size: the batch per process (the loader's ``batch_size``).

    Config::

        train_dataloader = dict(batch_size=64, sampler=dict(type="GlobalBatchSampler", batch_size=64), ...)
    """

    def __init__(self, dataset: Sized, batch_size: int, shuffle: bool = True, seed: int | None = None,
                 round_up: bool = True) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"GlobalBatchSampler: batch_size must be a positive integer, found {batch_size!r}")
        super().__init__(dataset, shuffle=shuffle, seed=seed, round_up=round_up)
        self.batch_size = batch_size

    def __iter__(self) -> Iterator[int]:
        if self.world_size == 1 or not self.round_up:
            return super().__iter__()
        n = len(self.dataset)
        if self.shuffle:  # DefaultSampler's permutation and rounding up, before it deals them out
            order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist()
        else:
            order = list(range(n))
        order = (order * (self.total_size // n + 1))[:self.total_size]
        mine: list[int] = []
        run = self.batch_size * self.world_size
        for start in range(0, self.total_size, run):
            chunk = order[start:start + run]
            share = len(chunk) // self.world_size  # total_size is a multiple of the world size
            mine.extend(chunk[self.rank * share:(self.rank + 1) * share])
        return iter(mine)
