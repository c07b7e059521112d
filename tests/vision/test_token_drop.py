"""Video-token dropping: how many tokens stay, which, and the tube variant."""

from __future__ import annotations

import pytest
import torch

from vlr_plugins.vision import gather_tokens, keep_index


def test_random_keeps_n_minus_floor_ratio_n_distinct_sorted_tokens():
    index = keep_index(3, (4, 3, 3), 0.1, generator=torch.Generator().manual_seed(0))
    n = 4 * 3 * 3
    assert index.shape == (3, n - int(0.1 * n))  # UMT rounds the dropped count down
    for row in index:
        assert row.unique().numel() == row.numel() and bool((row.diff() > 0).all())
        assert int(row.max()) < n


def test_videos_of_a_batch_keep_different_subsets():
    index = keep_index(8, (4, 4, 4), 0.5, generator=torch.Generator().manual_seed(0))
    assert len({tuple(row.tolist()) for row in index}) > 1


def test_tube_keeps_the_same_patches_in_every_tubelet():
    t, h, w = 3, 4, 4
    index = keep_index(2, (t, h, w), 0.5, "tube", generator=torch.Generator().manual_seed(1))
    assert index.shape == (2, t * (h * w - int(0.5 * h * w)))
    for row in index:
        per_tubelet = row.reshape(t, -1)
        assert all(bool((per_tubelet[i] // (h * w) == i).all()) for i in range(t))
        assert all(torch.equal(per_tubelet[i] % (h * w), per_tubelet[0]) for i in range(t))


def test_ratio_zero_keeps_everything():
    assert torch.equal(keep_index(2, (2, 2, 2), 0.0), torch.arange(8).expand(2, 8))


def test_gather_picks_the_indexed_tokens():
    tokens = torch.randn(2, 5, 3)
    index = torch.tensor([[0, 3], [1, 4]])
    got = gather_tokens(tokens, index)
    assert torch.equal(got[0], tokens[0, [0, 3]]) and torch.equal(got[1], tokens[1, [1, 4]])


@pytest.mark.parametrize("ratio, mode, message", [(1.0, "random", r"in \[0, 1\)"),
                                                   (0.2, "block", "must be one of")])
def test_bad_settings_are_refused(ratio, mode, message):
    with pytest.raises(ValueError, match=message):
        keep_index(1, (2, 2, 2), ratio, mode)
