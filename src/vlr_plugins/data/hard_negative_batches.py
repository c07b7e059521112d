"""Batches that hold each anchor's mined hard negatives: a batch sampler for any trainer.

In-batch contrastive losses (VTC) and video-text matching (VTM) only ever compare a video
with the other videos of its batch, so a mined hard negative (``vlr mine mvc``'s
``hard_negatives``) matters to them only if it shares the anchor's batch. A random batch of
128 out of millions almost never does; :class:`HardNegativeBatchSampler` composes the batches
so that it does, and is a plain ``torch.utils.data.Sampler`` of index lists (no trainer
imported): pass it as a ``DataLoader``'s ``batch_sampler``; MMEngine wraps it in
:mod:`vlr_plugins.integrations.mmengine.hard_negative_sampler`.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import Sampler

__all__ = ["HardNegativeBatchSampler", "negative_indices", "batches_per_replica"]


def negative_indices(samples: Sequence[Any]) -> list[tuple[int, ...]]:
    """Each sample's ``hard_negatives`` (ids of other samples, best first) as positions in
    ``samples``; ids not among ``samples`` (left out by ``data.fraction``) are dropped.

    ``samples``: anything with ``id`` and ``hard_negatives`` (:class:`~vlr_plugins.data.MVCSample`).
    """
    at = {str(s.id): i for i, s in enumerate(samples)}
    return [tuple(at[n] for n in getattr(s, "hard_negatives", ()) if n in at) for s in samples]


def batches_per_replica(num_samples: int, batch_size: int, num_replicas: int = 1, drop_last: bool = False) -> int:
    """How many batches each of ``num_replicas`` processes gets from :class:`HardNegativeBatchSampler`
    in an epoch: ``num_samples / (num_replicas * batch_size)`` rounded down with ``drop_last``
    (the remainder, under one global step, is left out, anew each epoch), else up (the last
    step's batches share what is left). The steps a schedule in iterations counts."""
    step = num_replicas * batch_size
    return num_samples // step if drop_last else math.ceil(num_samples / step)


class HardNegativeBatchSampler(Sampler[list[int]]):
    """Batches of anchors, each with up to ``negatives_per_anchor`` of its mined hard negatives.

    Args:
        negatives: per sample, the positions of its hard negatives in the dataset, best
            first (:func:`negative_indices` of the dataset's samples); ``()`` for a sample
            without any. At least one sample must have one.
        batch_size: the batch of one process (a global batch split over ``num_replicas``).
        negatives_per_anchor: how many of an anchor's negatives join its batch (>= 1, <
            ``batch_size``).
        seed: the epoch's order is a permutation drawn from ``seed + epoch``; the same on
            every process (MMEngine's ``DefaultSampler`` rule).
        num_replicas, rank: the processes and this one's place (default: from an initialised
            ``torch.distributed``, else 1 and 0).
        drop_last: leave out what does not fill a whole global step, instead of giving the
            last step smaller batches.

    An epoch (:meth:`set_epoch`, as ``DistributedSampler`` / ``DefaultSampler``): every sample
    is placed once, as an anchor or as an anchor's companion. The samples are taken in the
    epoch's permuted order; one not placed yet becomes the current batch's next anchor, and
    its negatives follow it into the batch, best first, skipping those placed already, until
    ``negatives_per_anchor`` of them are in the batch (one there already, as another anchor or
    companion, counts). A full batch cuts the group short: the negatives left out come later
    as anchors themselves. Samples without negatives fill the batches as anchors alone, so a
    batch is full whatever the corpus. The batches are planned for all processes at once and
    dealt out in turn, step by step: each process gets disjoint batches, the same number on
    every process (what DDP needs), together all the samples of the epoch. With ``drop_last``
    false the last step's batches share what is left (fewer samples than processes: the last
    two steps share; for a single step, the missing ones repeat the epoch's first samples, as
    ``DefaultSampler``'s ``round_up`` does).

    Yields lists of dataset positions, anchors each followed by their companions; ``len``:
    :func:`batches_per_replica`.

    Reference: not in the MVC paper, whose VTM "employs hard negative mining" within the
    batch (UMT's ``vtm_hard_neg``, here ``VideoTextPretrainingLoss(hard_negatives=True)``):
    this sampler brings the videos mined offline (``vlr mine mvc``) into that batch, where
    VTC's softmax and VTM's similarity-weighted draws find them.

    Relations: the ``set_epoch`` / seed / rank contract of MMEngine's ``DefaultSampler`` and
    ``torch.utils.data.DistributedSampler``; VTC and VTM gather across processes, so a
    negative counts wherever the global batch holds it, but a group is kept on one process
    (a local ``gather=False`` loss sees it too).

    Example::

        >>> negatives = negative_indices(dataset.samples)             # doctest: +SKIP
        >>> batches = HardNegativeBatchSampler(negatives, 128, negatives_per_anchor=1, seed=0)  # doctest: +SKIP
        >>> loader = DataLoader(dataset, batch_sampler=batches, collate_fn=...)  # doctest: +SKIP
        >>> batches.set_epoch(epoch)  # before each epoch            # doctest: +SKIP
    """

    def __init__(self, negatives: Sequence[Sequence[int]], batch_size: int, *, negatives_per_anchor: int = 1,
                 seed: int = 0, num_replicas: int | None = None, rank: int | None = None,
                 drop_last: bool = False) -> None:
        if num_replicas is None or rank is None:
            distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
            num_replicas = num_replicas if num_replicas is not None else (
                torch.distributed.get_world_size() if distributed else 1)
            rank = rank if rank is not None else (torch.distributed.get_rank() if distributed else 0)
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"expected 0 <= rank < num_replicas, found rank {rank} of {num_replicas}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size: expected an integer >= 1, found {batch_size!r}")
        if isinstance(negatives_per_anchor, bool) or not isinstance(negatives_per_anchor, int) or \
                negatives_per_anchor < 1:
            raise ValueError(f"negatives_per_anchor: expected an integer >= 1, found {negatives_per_anchor!r}")
        if negatives_per_anchor >= batch_size:
            raise ValueError(f"negatives_per_anchor {negatives_per_anchor} leaves no room for the anchor in a batch "
                             f"of {batch_size}: expected fewer than the batch")
        n = len(negatives)
        if n == 0:
            raise ValueError("no samples to batch")
        # compact, for corpora of millions: negatives of sample i are flat[offsets[i]:offsets[i + 1]]
        self._offsets, self._flat = array("q", [0]), array("q")
        for i, row in enumerate(negatives):
            for j in row:
                if not 0 <= j < n or j == i:
                    raise ValueError(f"sample {i}'s hard negative {j} is not another sample of the {n}")
            self._flat.extend(row)
            self._offsets.append(len(self._flat))
        if not self._flat:
            raise ValueError("no sample has a hard negative among the samples batched")
        self.num_samples, self.batch_size, self.negatives_per_anchor = n, batch_size, negatives_per_anchor
        self.seed, self.num_replicas, self.rank, self.drop_last = int(seed), num_replicas, rank, drop_last
        self.epoch = 0
        if len(self) < 1:
            raise ValueError(f"{n} samples give no full global batch of {num_replicas} x {batch_size} "
                             "(drop_last: false, or a smaller batch)")

    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch``'s order (call before each epoch, on every process)."""
        self.epoch = epoch

    def __len__(self) -> int:
        return batches_per_replica(self.num_samples, self.batch_size, self.num_replicas, self.drop_last)

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._compose(self.rank))

    def plan(self) -> list[list[int]]:
        """Every process's batches of this epoch, in dealing order (process ``r`` gets
        ``plan()[r::num_replicas]``)."""
        return self._compose(None)

    def _sizes(self) -> list[int]:
        """The size of every batch of the epoch, all processes', in dealing order."""
        steps, world, b = len(self), self.num_replicas, self.batch_size
        if self.drop_last:
            return [b] * (steps * world)
        left = self.num_samples - (steps - 1) * world * b
        # fewer samples left than processes: the last two steps share what they hold, so that
        # no batch is empty (only a single step, or batches of 1, must repeat samples)
        tail = 2 if left < world and steps > 1 and b > 1 else 1
        shared, count = left + (tail - 1) * world * b, tail * world
        last = [max(1, shared // count + (r < shared % count)) for r in range(count)]
        return [b] * ((steps - tail) * world) + last

    def _compose(self, rank: int | None) -> list[list[int]]:
        """The epoch's batches of process ``rank`` (``None``: of all, in dealing order); every
        process composes them all, keeping its own."""
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        order = torch.randperm(self.num_samples, generator=g).tolist()
        placed = bytearray(self.num_samples)
        offsets, flat, k, world = self._offsets, self._flat, self.negatives_per_anchor, self.num_replicas
        sizes = self._sizes()
        kept: list[list[int]] = []
        b, batch, in_batch = 0, [], set()
        for anchor in order:
            if placed[anchor]:
                continue
            if len(batch) == sizes[b]:
                if rank is None or b % world == rank:
                    kept.append(batch)
                b += 1
                if b == len(sizes):
                    break
                batch, in_batch = [], set()
            batch.append(anchor)
            in_batch.add(anchor)
            placed[anchor] = 1
            row = flat[offsets[anchor]:offsets[anchor + 1]]
            have = sum(1 for j in row if j in in_batch)
            for j in row:
                if have >= k or len(batch) == sizes[b]:
                    break
                if not placed[j]:
                    batch.append(j)
                    in_batch.add(j)
                    placed[j] = 1
                    have += 1
        else:  # every sample placed; the batches from b on are the last step's, not yet kept
            repeat = iter(order)  # only with fewer samples left for the last step than processes
            for last in range(b, len(sizes)):
                if last > b:
                    batch = []
                while len(batch) < sizes[last]:
                    batch.append(next(repeat))
                if rank is None or last % world == rank:
                    kept.append(batch)
        return kept
