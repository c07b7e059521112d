"""How images and clips reach the processor: decoding, repetition, de-normalisation, limits."""

from __future__ import annotations

import pytest
import torch

from vlr_plugins.data.video import frame_indices
from vlr_plugins.mllm import VideoInput, clip_pixels, image_pixels

MEAN, STD = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)


def test_clip_tensors_are_repeated_frame_by_frame():
    frames = torch.arange(3, dtype=torch.uint8).view(3, 1, 1, 1).expand(3, 3, 2, 2)
    out = clip_pixels(frames, VideoInput(frame_repeat=2), MEAN, STD)
    assert out.dtype == torch.uint8 and [int(f[0, 0, 0]) for f in out] == [0, 0, 1, 1, 2, 2]
    assert torch.equal(clip_pixels(frames, VideoInput(), MEAN, STD), frames)


def test_normalised_floats_go_back_to_pixels():
    pixels = torch.randint(0, 256, (2, 3, 4, 4), generator=torch.Generator().manual_seed(0)).float()
    m, s = torch.tensor(MEAN).view(3, 1, 1), torch.tensor(STD).view(3, 1, 1)
    normalised = (pixels / 255 - m) / s
    torch.testing.assert_close(clip_pixels(normalised, VideoInput(), MEAN, STD), pixels, atol=1e-3, rtol=0)
    torch.testing.assert_close(image_pixels(normalised[0], MEAN, STD), pixels[0], atol=1e-3, rtol=0)


def test_files_are_decoded_by_the_sampling_rule(tmp_path):
    pytest.importorskip("av")
    from _tiny_mllm import write_clip

    path = write_clip(tmp_path / "v.mkv", num_frames=10, height=28, width=28)
    out = clip_pixels(path, VideoInput(num_frames=3, strategy="uniform", frame_repeat=2), MEAN, STD)
    expected = [10 * k for k in frame_indices(10, 3, "uniform") for _ in range(2)]
    assert out.shape == (6, 3, 28, 28) and [int(f[0, 0, 0]) for f in out] == expected


def test_pixel_limits_become_the_processor_size():
    assert VideoInput().size({"shortest_edge": 1, "longest_edge": 2}) is None
    assert VideoInput(max_pixels=230400).size({"shortest_edge": 100352, "longest_edge": 602112}) == {
        "shortest_edge": 100352, "longest_edge": 230400}


@pytest.mark.parametrize("kw, message", [
    (dict(strategy="every"), "strategy must be one of"),
    (dict(num_frames=0), "num_frames must be an integer >= 1, found 0"),
    (dict(min_pixels=10, max_pixels=5), r"min_pixels \(10\) exceeds max_pixels \(5\)"),
])
def test_video_input_refuses_bad_settings(kw, message):
    with pytest.raises(ValueError, match=message):
        VideoInput(**kw)


def test_bad_shapes_and_types_are_named():
    with pytest.raises(ValueError, match=r"a clip tensor must be \(T, 3, H, W\), found shape \(3, 4, 4\)"):
        clip_pixels(torch.zeros(3, 4, 4, dtype=torch.uint8), VideoInput(), MEAN, STD)
    with pytest.raises(TypeError, match="a video is a file path or a"):
        clip_pixels(3, VideoInput(), MEAN, STD)
    with pytest.raises(ValueError, match="pixels must be uint8 .0-255. or float .normalised., found torch.int64"):
        image_pixels(torch.zeros(3, 2, 2, dtype=torch.long), MEAN, STD)
