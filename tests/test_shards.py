"""vlr_plugins/_shards.py: the split of n records over a job array or torchrun ranks."""

from __future__ import annotations

import pytest

from vlr_plugins._shards import resolve_shard, shard_range
from vlr_plugins.errors import UsageError


@pytest.mark.parametrize("n", [0, 1, 5, 13, 64, 100])
@pytest.mark.parametrize("count", [1, 2, 3, 7])
@pytest.mark.parametrize("align", [1, 3, 16])
def test_shards_cover_the_records_once_in_order_on_batch_boundaries(n, count, align):
    ranges = [shard_range(n, i, count, align=align) for i in range(count)]
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # contiguous, in order
    assert all(start % align == 0 for start, _ in ranges if start < n)  # a shard starts where a batch does
    # the single process' batches, [k*align, (k+1)*align), each fall in one shard
    for k in range(0, n, align):
        assert sum(start <= k < stop for start, stop in ranges) == 1
        assert [start <= min(k + align, n) - 1 < stop for start, stop in ranges] == [start <= k < stop
                                                                                   for start, stop in ranges]
    blocks = [-(-(stop - start) // align) for start, stop in ranges]
    assert max(blocks) - min(blocks) <= 1  # as even as whole batches allow


def test_align_1_is_vlr_mines_split():
    assert [shard_range(10, i, 3) for i in range(3)] == [(10 * i // 3, 10 * (i + 1) // 3) for i in range(3)]


def test_torchrun_env_and_explicit_options():
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}
    assert resolve_shard(None, None, env) == (1, 2)
    assert resolve_shard(1, 2, env) == (1, 2)  # the same: fine
    assert resolve_shard(None, None, {}) is None
    assert resolve_shard(None, None, {"RANK": "0", "WORLD_SIZE": "1"}) is None  # one process does it all
    assert resolve_shard(3, 4, {"RANK": "0", "WORLD_SIZE": "1"}) == (3, 4)
    with pytest.raises(UsageError, match="rank 1 of 2"):
        resolve_shard(0, 2, env)
    with pytest.raises(UsageError, match="WORLD_SIZE"):
        resolve_shard(None, None, {"RANK": "0"})
    with pytest.raises(UsageError, match="--shard-index: expected 0 .. 1"):
        resolve_shard(2, 2, {})
