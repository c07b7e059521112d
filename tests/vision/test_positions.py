"""Space-time position tables: the sinusoid table, and resampling to another grid as UMT does."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from _video_reference import sinusoid

from vlr_plugins.vision import resample_spatial, resample_temporal, sincos_table, sincos_video_table


def test_sincos_table_is_the_transformer_sinusoid():
    assert torch.allclose(sincos_table(12, 8), sinusoid(12, 8), atol=1e-6)


def test_same_grid_gives_the_flat_table():
    assert torch.equal(sincos_video_table((2, 3, 3), 8), sincos_table(18, 8))


def test_other_frame_count_is_resampled_linearly_over_time():
    # UMT: 8-frame weights on 16 frames, here 2 tubelets -> 4 on a 2x2 grid
    source = sinusoid(2 * 4, 6).reshape(2, 4, 6)  # (T0, HW, D)
    expected = F.interpolate(source.permute(1, 2, 0), size=4, mode="linear", align_corners=False)
    expected = expected.permute(2, 0, 1).reshape(16, 6)
    got = sincos_video_table((4, 2, 2), 6, source_grid=(2, 2, 2))
    assert got.shape == (16, 6)
    assert torch.allclose(got, expected, atol=1e-6)


def test_other_resolution_is_resampled_bicubically_over_the_patch_grid():
    source = sinusoid(2 * 4, 6).reshape(2, 2, 2, 6).permute(0, 3, 1, 2)  # (T, D, H0, W0)
    expected = F.interpolate(source, size=(3, 3), mode="bicubic", align_corners=False)
    expected = expected.permute(0, 2, 3, 1).reshape(18, 6)
    assert torch.allclose(sincos_video_table((2, 3, 3), 6, source_grid=(2, 2, 2)), expected, atol=1e-6)


def test_resampling_to_the_same_size_changes_nothing():
    table = torch.randn(1, 6, 4)
    assert resample_temporal(table, 6) is table
    assert resample_spatial(table, (2, 3), (2, 3)) is table


def test_learnt_tables_resample_with_the_same_rules():
    temporal = torch.randn(1, 2, 4)
    expected = F.interpolate(temporal.transpose(1, 2), size=5, mode="linear", align_corners=False)
    assert torch.allclose(resample_temporal(temporal, 5), expected.transpose(1, 2))
    spatial = torch.randn(1, 4, 3)
    grid = F.interpolate(spatial.reshape(1, 2, 2, 3).permute(0, 3, 1, 2), size=(4, 4), mode="bicubic",
                         align_corners=False)
    expected = grid.permute(0, 2, 3, 1).reshape(1, 16, 3)
    assert torch.allclose(resample_spatial(spatial, (2, 2), (4, 4)), expected)


def test_a_table_that_does_not_cover_the_grid_is_refused():
    import pytest

    with pytest.raises(ValueError, match="5 rows does not cover a 2x2 patch grid"):
        resample_spatial(torch.randn(1, 5, 3), (2, 2), (3, 3))
