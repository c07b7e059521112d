"""length_batches: items sorted longest first, cut by count and by padded tokens; order restored."""

from __future__ import annotations

import random

import pytest

from vlr_plugins.mllm.length_batches import in_input_order, length_batches


def test_batches_hold_similar_lengths_within_both_limits():
    rng = random.Random(0)
    lengths = [rng.randint(1, 300) for _ in range(200)]
    batches = length_batches(lengths, batch_size=16, max_tokens=1024)
    assert sorted(i for b in batches for i in b) == list(range(200))
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(lengths, reverse=True)
    for b in batches:
        assert len(b) <= 16
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 1024
    # padded tokens: far fewer than batches of 16 in the given order
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    given = sum(len(lengths[i:i + 16]) * max(lengths[i:i + 16]) for i in range(0, 200, 16))
    assert padded < 0.75 * given


def test_limits_none_and_ties_and_items_over_the_budget():
    assert length_batches([3, 3, 3]) == [[0, 1, 2]]
    assert length_batches([5, 40, 6, 38, 7], batch_size=2) == [[1, 3], [4, 2], [0]]
    assert length_batches([500, 10, 10], max_tokens=100) == [[0], [1, 2]]
    assert length_batches([]) == []
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1 or None"):
        length_batches([1], batch_size=0)


@pytest.mark.parametrize("share", [0.0, 0.1, 0.3])
def test_each_batch_keeps_its_padding_within_the_share_and_takes_every_item_that_fits(share):
    rng = random.Random(1)
    lengths = [rng.choice([rng.randint(4, 12), rng.randint(25, 300)]) for _ in range(300)]
    batches = length_batches(lengths, batch_size=16, max_padding=share)
    assert [lengths[i] for b in batches for i in b] == sorted(lengths, reverse=True)

    def padding(b):
        return 1 - sum(lengths[i] for i in b) / (len(b) * max(lengths[i] for i in b))

    for b, after in zip(batches, batches[1:] + [None]):
        assert len(b) <= 16 and padding(b) <= share + 1e-12
        if after is not None and len(b) < 16:  # closed by the share: the next item would not fit
            assert padding(b + after[:1]) > share
    if share == 0.0:
        assert all(len({lengths[i] for i in b}) == 1 for b in batches)
    with pytest.raises(ValueError, match=r"max_padding must be a fraction in \[0, 1\) or None"):
        length_batches([1], max_padding=1.5)


def test_results_come_back_in_input_order():
    lengths = [5, 40, 6, 38, 7]
    batches = length_batches(lengths, batch_size=2)
    results = [[f"item{i}" for i in b] for b in batches]
    assert in_input_order(batches, results) == [f"item{i}" for i in range(5)]
    with pytest.raises(ValueError, match="a batch of 2 items gave 1 results"):
        in_input_order([[0, 1]], [["x"]])
