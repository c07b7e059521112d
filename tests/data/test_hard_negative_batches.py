"""Hard-negative-aware batches (data/hard_negative_batches.py): each anchor's mined negatives
share its batch, every sample is placed once an epoch, the order is the seed's and the
epoch's, and processes get disjoint batches that together hold the epoch."""

from __future__ import annotations

import random

import pytest
import torch
from torch.utils.data import DataLoader

from vlr_plugins.data import HardNegativeBatchSampler, MVCSample, batches_per_replica, negative_indices


def pairs(n: int) -> list[tuple[int, ...]]:
    """Samples 0..n-1 in mutual pairs (0, 1), (2, 3), ...: each the other's one negative."""
    return [(i ^ 1,) for i in range(n)]


def random_negatives(n: int, k: int, seed: int, without: float = 0.3) -> list[tuple[int, ...]]:
    """A random mined corpus: about ``without`` of the samples have no negatives, the others
    ``k`` distinct other samples, best first."""
    rng = random.Random(seed)
    return [() if rng.random() < without else tuple(rng.sample([j for j in range(n) if j != i], k))
            for i in range(n)]


def epoch(sampler: HardNegativeBatchSampler, e: int = 0) -> list[list[int]]:
    sampler.set_epoch(e)
    return list(sampler)


def flat(batches: list[list[int]]) -> list[int]:
    return [i for b in batches for i in b]


def test_mutual_pairs_always_share_their_batch():
    """An even batch of pairs: every anchor's negative follows it into its batch."""
    sampler = HardNegativeBatchSampler(pairs(40), 4, seed=1)
    for e in range(3):
        for batch in epoch(sampler, e):
            assert len(batch) == 4
            assert batch[1] == batch[0] ^ 1 and batch[3] == batch[2] ^ 1, batch


def test_an_anchor_brings_up_to_negatives_per_anchor_of_its_negatives():
    """Triplets (each lists the other two, best first): with two per anchor, every batch of 6
    is two whole triplets; with one per anchor, each anchor brings its best unplaced one."""
    triplets = [tuple(j for j in range(3 * (i // 3), 3 * (i // 3) + 3) if j != i) for i in range(30)]
    for batch in epoch(HardNegativeBatchSampler(triplets, 6, negatives_per_anchor=2, seed=0)):
        assert sorted(batch[:3]) == list(range(3 * (batch[0] // 3), 3 * (batch[0] // 3) + 3))
        assert sorted(batch[3:]) == list(range(3 * (batch[3] // 3), 3 * (batch[3] // 3) + 3))


def test_an_anchor_takes_its_best_negatives_not_placed_yet():
    """Walking an epoch's batches: each anchor (an element that is no earlier anchor's
    companion) is followed by its best negatives placed nowhere before, until it has
    ``negatives_per_anchor`` in the batch (one there already counts) or the batch is full."""
    negatives = random_negatives(90, 4, seed=8, without=0.2)
    for k in (1, 2):
        placed: set[int] = set()
        for batch in epoch(HardNegativeBatchSampler(negatives, 7, negatives_per_anchor=k, seed=2), 1):
            i = 0
            while i < len(batch):
                anchor = batch[i]
                assert anchor not in placed
                have = len(set(negatives[anchor]) & set(batch[:i]))
                placed.add(anchor)
                free = [j for j in negatives[anchor] if j not in placed and j not in batch[:i]]
                take = free[:max(0, k - have)][:len(batch) - i - 1]
                assert batch[i + 1:i + 1 + len(take)] == take, (batch, anchor)
                placed.update(take)
                i += 1 + len(take)


def test_a_negative_is_left_out_only_by_a_full_batch_or_an_earlier_placement():
    """A random mined corpus with samples that have none: for every sample, each of its
    first negatives is in its batch, or placed in an earlier batch, or the sample is a
    companion or its batch's last element (the batch was full)."""
    negatives = random_negatives(101, 3, seed=5)
    sampler = HardNegativeBatchSampler(negatives, 8, negatives_per_anchor=1, seed=3)
    together = 0
    for e in range(2):
        batches = epoch(sampler, e)
        where = {i: b for b, batch in enumerate(batches) for i in batch}
        for b, batch in enumerate(batches):
            for pos, x in enumerate(batch):
                if not negatives[x]:
                    continue
                if any(where[j] == b for j in negatives[x]):
                    together += 1
                    continue
                companion = any(x in negatives[y] for y in batch[:pos])
                # none in the batch: all placed before, or no room was left after x
                assert companion or pos == len(batch) - 1 or all(where[j] < b for j in negatives[x]), (batch, x)
    assert together > 60  # most anchors train with a mined negative in their batch


def test_samples_without_negatives_fill_the_batches():
    negatives = [(1,), (0,)] + [()] * 20
    batches = epoch(HardNegativeBatchSampler(negatives, 5, seed=0))
    assert [len(b) for b in batches] == [5, 5, 5, 5, 2]
    batch = next(b for b in batches if 0 in b or 1 in b)
    assert {0, 1} <= set(batch) or batch[-1] in (0, 1)


@pytest.mark.parametrize("n, batch_size", [(103, 8), (96, 8), (7, 3)])
def test_every_sample_is_placed_exactly_once_an_epoch(n, batch_size):
    sampler = HardNegativeBatchSampler(random_negatives(n, 2, seed=n), batch_size, seed=7)
    for e in range(3):
        batches = epoch(sampler, e)
        assert sorted(flat(batches)) == list(range(n))
        assert len(batches) == len(sampler) == -(-n // batch_size)
        assert all(len(b) == batch_size for b in batches[:-1])


def test_drop_last_gives_whole_batches_and_leaves_the_remainder_out():
    sampler = HardNegativeBatchSampler(random_negatives(103, 2, seed=1), 8, seed=0, drop_last=True)
    batches = epoch(sampler)
    assert len(batches) == len(sampler) == 12 and all(len(b) == 8 for b in batches)
    assert len(set(flat(batches))) == 96
    left_out = [set(range(103)) - set(flat(epoch(sampler, e))) for e in range(3)]
    assert left_out[0] != left_out[1] or left_out[1] != left_out[2]  # a new remainder each epoch


def test_the_order_is_the_seeds_and_changes_every_epoch():
    negatives = random_negatives(64, 2, seed=2)
    a, b = (HardNegativeBatchSampler(negatives, 8, seed=11) for _ in range(2))
    assert epoch(a, 0) == epoch(b, 0) and epoch(a, 3) == epoch(b, 3)
    assert epoch(a, 0) != epoch(a, 1)
    assert epoch(a, 0) != epoch(HardNegativeBatchSampler(negatives, 8, seed=12), 0)
    a.set_epoch(2)
    assert list(a) == list(a)  # iterating again repeats the epoch


@pytest.mark.parametrize("n, batch_size, drop_last", [(64, 4, False), (67, 4, False), (67, 4, True), (9, 4, False)])
def test_two_processes_get_disjoint_batches_that_hold_the_epoch(n, batch_size, drop_last):
    negatives = pairs(n) if n % 2 == 0 else random_negatives(n, 2, seed=4)
    ranks = [HardNegativeBatchSampler(negatives, batch_size, seed=5, num_replicas=2, rank=r, drop_last=drop_last)
             for r in range(2)]
    for e in range(2):
        got = [epoch(s, e) for s in ranks]
        assert len(got[0]) == len(got[1]) == len(ranks[0]) == batches_per_replica(n, batch_size, 2, drop_last)
        assert all(got[0]) and all(all(b) for b in got)  # no empty batch on any process
        assert not set(flat(got[0])) & set(flat(got[1]))
        both = flat(got[0]) + flat(got[1])
        assert len(both) == len(set(both))
        if drop_last:
            assert len(both) == 2 * batch_size * (n // (2 * batch_size))
        else:
            assert sorted(both) == list(range(n))
        if n % 2 == 0:  # each pair on one process, in one batch
            assert all(b[i + 1] == b[i] ^ 1 for r in got for b in r for i in range(0, len(b), 2))
    assert epoch(ranks[0], 0) != epoch(ranks[0], 1)
    ranks[1].set_epoch(1)
    assert [epoch(s, 1) for s in ranks] == [ranks[1].plan()[r::2] for r in range(2)]  # one plan, dealt out


def test_a_last_step_with_fewer_samples_than_processes():
    ranks = [HardNegativeBatchSampler(pairs(6), 2, seed=0, num_replicas=4, rank=r) for r in range(4)]
    got = [epoch(s) for s in ranks]  # 6 samples, 4 processes of 2: one step, 2 + 2 + 1 + 1
    assert [len(r) for r in got] == [1, 1, 1, 1] and [len(r[0]) for r in got] == [2, 2, 1, 1]
    assert sorted(flat([b for r in got for b in r])) == list(range(6))
    # 3 samples, 4 processes: each process one batch, one sample repeated
    three = [epoch(HardNegativeBatchSampler([(1,), (0,), ()], 2, seed=0, num_replicas=4, rank=r)) for r in range(4)]
    assert [len(r) for r in three] == [1, 1, 1, 1]
    seen = [i for r in three for b in r for i in b]
    assert len(seen) == 4 and set(seen) == {0, 1, 2}


def test_a_data_loader_yields_the_samplers_batches():
    sampler = HardNegativeBatchSampler(pairs(12), 4, seed=0)
    sampler.set_epoch(1)
    loader = DataLoader(list(range(100, 112)), batch_sampler=sampler)
    assert [b.tolist() for b in loader] == [[100 + i for i in b] for b in sampler]


def test_negative_indices_are_positions_of_the_samples_kept():
    samples = [MVCSample("a", "a.mp4", {"O": "x"}, hard_negatives=("c", "b")),
               MVCSample("b", "b.mp4", {"O": "y"}, hard_negatives=("gone", "a")),
               MVCSample("c", "c.mp4", {"O": "z"})]
    assert negative_indices(samples) == [(2, 1), (0,), ()]


@pytest.mark.parametrize("args, words", [
    (dict(negatives=[(), ()], batch_size=2), "no sample has a hard negative"),
    (dict(negatives=pairs(4), batch_size=2, negatives_per_anchor=0), "negatives_per_anchor"),
    (dict(negatives=pairs(4), batch_size=2, negatives_per_anchor=2), "no room for the anchor"),
    (dict(negatives=[(5,), ()], batch_size=2), "not another sample"),
    (dict(negatives=[(0,), ()], batch_size=2), "not another sample"),
    (dict(negatives=pairs(4), batch_size=8, drop_last=True), "no full global batch"),
    (dict(negatives=pairs(4), batch_size=2, num_replicas=2, rank=2), "rank"),
])
def test_bad_arguments_are_refused(args, words):
    with pytest.raises(ValueError, match=words):
        HardNegativeBatchSampler(args.pop("negatives"), **args)


def test_processes_default_to_torch_distributed(monkeypatch):
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    sampler = HardNegativeBatchSampler(pairs(4), 2)
    assert (sampler.num_replicas, sampler.rank) == (1, 0)
