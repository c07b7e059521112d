"""GlobalBatchSampler (global_batch_sampler.py): each process's batch ``k`` is its slice of
one-process batch ``k``, so the batches gathered rank by rank are the one-process batches in
their order; on real gloo processes, against ``DefaultSampler`` with one process."""

from __future__ import annotations

import pytest

pytest.importorskip("mmengine")

import torch.distributed as dist  # noqa: E402


def _batches(order: list[int], size: int) -> list[list[int]]:
    return [order[i:i + size] for i in range(0, len(order), size)]


def _rank_orders(rank: int) -> dict[str, list[int]]:
    from vlr_plugins.integrations.mmengine.global_batch_sampler import GlobalBatchSampler

    out = {}
    for n in (12, 10):  # 12: three full global batches of 4; 10: two, then a run of 2 (1 per rank)
        sampler = GlobalBatchSampler(list(range(n)), batch_size=2, seed=7)
        sampler.set_epoch(1)
        out[str(n)] = list(sampler)
        assert len(out[str(n)]) == len(sampler)
    return out


def test_two_processes_gather_the_one_process_batches_in_order(tmp_path):
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("no gloo backend")
    from _gloo import run_on_ranks
    from mmengine.dataset import DefaultSampler

    ranks = run_on_ranks(_rank_orders, 2, tmp_path)
    for n in (12, 10):
        one = DefaultSampler(list(range(n)), seed=7)  # this process: no group, world size 1
        one.set_epoch(1)
        reference = list(one)
        r0, r1 = ranks[0][str(n)], ranks[1][str(n)]
        assert sorted(r0 + r1) == sorted(reference)  # the epoch, each sample once
        gathered = [a + b for a, b in zip(_batches(r0, 2), _batches(r1, 2), strict=True)]
        assert [x for b in gathered for x in b] == reference  # the one-process order
        full = n // 4
        assert gathered[:full] == _batches(reference, 4)[:full]  # batch k is one-process batch k
        if n == 10:  # the last run of 2 is split 1 + 1
            assert [len(b) for b in _batches(r0, 2)] == [2, 2, 1] and gathered[-1] == reference[8:]

def test_one_process_is_default_samplers_order():
    from mmengine.dataset import DefaultSampler

    from vlr_plugins.integrations.mmengine.global_batch_sampler import GlobalBatchSampler

    ours, theirs = GlobalBatchSampler(list(range(9)), batch_size=4, seed=3), DefaultSampler(list(range(9)), seed=3)
    assert list(ours) == list(theirs) and list(ours) != list(range(9))
    with pytest.raises(ValueError, match="batch_size must be a positive integer, found 0"):
        GlobalBatchSampler(list(range(9)), batch_size=0)
