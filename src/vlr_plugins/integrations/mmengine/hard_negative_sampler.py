"""The core :class:`~vlr_plugins.data.HardNegativeBatchSampler` as an MMEngine batch sampler.

MMEngine builds a ``batch_sampler`` with ``sampler=`` (the loader's ``DefaultSampler``) and
``batch_size=`` as default arguments, and sets the epoch on ``batch_sampler.sampler``
(``DistSamplerSeedHook``, the train loop). So the batch sampler takes from that sampler what
the core one needs -- the dataset, the seed every rank shares, the rank and world size -- and
follows its epoch; the batches themselves are the core's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from vlr_plugins.data.hard_negative_batches import HardNegativeBatchSampler, negative_indices
from vlr_plugins.errors import ConfigError
from vlr_plugins.integrations.mmengine.registry import DATA_SAMPLERS

__all__ = ["MinedHardNegativeBatchSampler"]


@DATA_SAMPLERS.register_module()
class MinedHardNegativeBatchSampler(HardNegativeBatchSampler):
    """Batches of the dataset's samples, each anchor with up to ``negatives_per_anchor`` of
    its mined ``hard_negatives`` (ids of other samples of the dataset).

    Args:
        sampler: the loader's ``DefaultSampler`` (MMEngine passes it): its ``dataset``
            (one with ``samples``, e.g. ``MVCVideoTextDataset``), ``seed``, ``rank``,
            ``world_size``, and the ``epoch`` MMEngine sets on it.
        batch_size: the batch per process (MMEngine passes the loader's).
        negatives_per_anchor, drop_last: the core sampler's.

    Config::

        train_dataloader = dict(batch_size=128, sampler=dict(type="DefaultSampler", shuffle=True),
                                batch_sampler=dict(type="MinedHardNegativeBatchSampler",
                                                   negatives_per_anchor=1, drop_last=True), ...)
    """

    def __init__(self, sampler: Any, batch_size: int, negatives_per_anchor: int = 1, drop_last: bool = False) -> None:
        lacks = [a for a in ("dataset", "seed", "rank", "world_size", "epoch") if not hasattr(sampler, a)]
        if lacks or not hasattr(sampler.dataset, "samples"):
            what = f"a sampler without {', '.join(lacks)}" if lacks else "a dataset without samples"
            raise ConfigError(f"MinedHardNegativeBatchSampler batches the samples of a dataset such as "
                              f"MVCVideoTextDataset under the loader's DefaultSampler; found {what} "
                              f"({type(sampler).__name__})")
        super().__init__(negative_indices(sampler.dataset.samples), batch_size,
                         negatives_per_anchor=negatives_per_anchor, seed=sampler.seed,
                         num_replicas=sampler.world_size, rank=sampler.rank, drop_last=drop_last)
        self.sampler = sampler

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)
        super().set_epoch(epoch)

    def __iter__(self) -> Iterator[list[int]]:
        super().set_epoch(self.sampler.epoch)  # MMEngine sets the epoch on the wrapped sampler
        return super().__iter__()

