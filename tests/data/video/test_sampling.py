"""Frame sampling: UMT's and CaReBench's rules, written here from their code's arithmetic."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

from vlr_plugins.data.video import FRAME_STRATEGIES, frame_indices, window_frames

SIZES = [(n_frames, n) for n_frames in (1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 100, 257, 1000, 4567)
         for n in (1, 4, 8, 16, 32)]


def umt_segments(num_frames, n):
    """UMT's get_frame_indices: min(n, L) segments from np.linspace(0, L, k + 1).astype(int)."""
    k = min(n, num_frames)
    bounds = np.linspace(start=0, stop=num_frames, num=k + 1).astype(int)
    return [(int(bounds[i]), int(bounds[i + 1]) - 1) for i in range(k)]  # inclusive (first, last)


def umt_middle(num_frames, n):
    """UMT's sample='middle', padded with the last frame up to n."""
    picked = [(a + b) // 2 for a, b in umt_segments(num_frames, n)]
    return picked + [picked[-1]] * (n - len(picked))


def carebench_uniform(num_frames, n=32):
    """CaReBench's read_frames_decord(video, num_frames=32): its default sample='middle',
    i.e. UMT's rule -- computed here with integer arithmetic instead of linspace."""
    k = min(n, num_frames)
    picked = [((i * num_frames) // k + ((i + 1) * num_frames) // k - 1) // 2 for i in range(k)]
    return picked + [picked[-1]] * (n - k)


def umt_fps(num_frames, video_fps, fps, max_frames=-1):
    """UMT's sample='fps{fps}'."""
    duration = float(num_frames) / video_fps
    delta = 1 / fps
    seconds = np.arange(0 + delta / 2, duration + delta / 2, delta)
    picked = [int(e) for e in np.around(seconds * video_fps).astype(int) if e < num_frames]
    return picked[:max_frames] if max_frames > 0 else picked


@pytest.mark.parametrize("num_frames,n", SIZES)
def test_middle_is_umt_middle(num_frames, n):
    assert frame_indices(num_frames, n, "middle") == umt_middle(num_frames, n)


@pytest.mark.parametrize("num_frames,n", SIZES)
def test_uniform_is_carebench_rule(num_frames, n):
    assert frame_indices(num_frames, n, "uniform") == carebench_uniform(num_frames, n)


def test_carebench_32_frames_of_a_typical_clip():
    # a 10 s clip at 30 fps: 32 segments of 9-10 frames, the middle of each
    got = frame_indices(300, 32, "uniform")
    assert got == carebench_uniform(300) and got[:3] == [4, 13, 22] and got[-1] == 294


@pytest.mark.parametrize("num_frames,n", SIZES)
def test_rand_draws_one_frame_inside_each_umt_segment(num_frames, n):
    got = frame_indices(num_frames, n, "rand", seed=3)
    segments = umt_segments(num_frames, n)
    assert len(got) == n
    for index, (first, last) in zip(got, segments):
        assert first <= index <= last
    assert got[len(segments):] == [got[len(segments) - 1]] * (n - len(segments))  # padding


def test_rand_reaches_every_frame_of_a_segment_including_its_last():
    # UMT's random.choice(range(first, last)) never picks `last`; this sampler does
    seen = [set() for _ in range(4)]
    for seed in range(300):
        for s, index in zip(seen, frame_indices(20, 4, "rand", seed=seed)):
            s.add(index)
    assert seen == [set(range(a, b + 1)) for a, b in umt_segments(20, 4)]


def test_rand_is_reproducible_by_seed_whatever_the_global_random_state():
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    first = frame_indices(1000, 16, "rand", seed=7)
    torch.manual_seed(123)
    random.seed(123)
    np.random.seed(123)
    torch.rand(5)
    assert frame_indices(1000, 16, "rand", seed=7) == first
    assert frame_indices(1000, 16, "rand", seed=8) != first
    assert torch.initial_seed() == 123  # a seeded draw leaves the global generator alone


def test_rand_without_seed_follows_torch_global_generator():
    torch.manual_seed(5)
    a = frame_indices(1000, 16, "rand")
    b = frame_indices(1000, 16, "rand")
    torch.manual_seed(5)
    assert frame_indices(1000, 16, "rand") == a and a != b


@pytest.mark.parametrize("strategy", ["rand", "middle", "uniform"])
def test_short_videos_show_every_frame_once_then_repeat_the_last(strategy):
    assert frame_indices(5, 8, strategy, seed=0) == [0, 1, 2, 3, 4, 4, 4, 4]
    assert frame_indices(1, 3, strategy, seed=0) == [0, 0, 0]


@pytest.mark.parametrize("video_fps", [24.0, 25.0, 29.97, 30.0])
@pytest.mark.parametrize("fps", [0.5, 1.0, 2.0, 3.0])
@pytest.mark.parametrize("num_frames", [1, 10, 61, 300, 1799])
def test_fps_is_umt_fps(video_fps, fps, num_frames):
    assert frame_indices(num_frames, None, "fps", fps=fps, video_fps=video_fps) == umt_fps(num_frames, video_fps, fps)
    assert frame_indices(num_frames, 4, "fps", fps=fps, video_fps=video_fps) == umt_fps(num_frames, video_fps, fps, 4)


def frames_shown_during(num_frames, video_fps, start, end):
    """Brute force: frame i is shown over [i / fps, (i + 1) / fps); keep those meeting [start, end)."""
    end = num_frames / video_fps if end is None else end
    return [i for i in range(num_frames) if i / video_fps < end and (i + 1) / video_fps > max(start, 0)]


@pytest.mark.parametrize("window", [(0.0, 1.0), (2.0, 4.0), (1.01, 1.02), (3.3, 7.77), (9.5, None),
                                    (9.5, 60.0), (-1.0, 0.5), (0.0, None)])
@pytest.mark.parametrize("video_fps", [24.0, 29.97, 30.0])
def test_window_keeps_the_frames_shown_during_it(window, video_fps):
    num_frames = int(10 * video_fps)  # a 10 s video
    assert list(window_frames(num_frames, window, video_fps)) == frames_shown_during(num_frames, video_fps, *window)


@pytest.mark.parametrize("strategy", FRAME_STRATEGIES)
def test_every_strategy_samples_inside_the_window_as_if_it_were_the_video(strategy):
    window, video_fps = (12.0, 17.5), 30.0  # frames 360..524 of a 60 s video
    inside = window_frames(1800, window, video_fps)
    assert (inside.start, inside.stop) == (360, 525)
    got = frame_indices(1800, 8, strategy, seed=1, fps=1.0, video_fps=video_fps, window=window)
    alone = frame_indices(len(inside), 8, strategy, seed=1, fps=1.0, video_fps=video_fps)
    assert got == [360 + i for i in alone]
    assert all(360 <= i < 525 for i in got)


def test_a_window_shorter_than_n_frames_repeats_its_last_frame():
    assert frame_indices(300, 4, "middle", video_fps=30.0, window=(1.0, 1.05)) == [30, 31, 31, 31]


def test_bad_arguments_say_what_was_expected():
    with pytest.raises(ValueError, match="unknown frame sampling strategy 'random'"):
        frame_indices(10, 4, "random")
    with pytest.raises(ValueError, match="at least one frame"):
        frame_indices(0, 4, "middle")
    with pytest.raises(ValueError, match="num_samples >= 1"):
        frame_indices(10, 0, "rand")
    with pytest.raises(ValueError, match="needs fps > 0 and video_fps > 0"):
        frame_indices(10, 4, "fps", fps=1.0)
    with pytest.raises(ValueError, match="video's frame rate"):
        frame_indices(10, 4, "middle", window=(0.0, 1.0))
    with pytest.raises(ValueError, match="starts after the video's end"):
        frame_indices(300, 4, "middle", video_fps=30.0, window=(10.0, 12.0))
    with pytest.raises(ValueError, match="end must be after its start"):
        frame_indices(300, 4, "middle", video_fps=30.0, window=(3.0, 3.0))
    assert math.isclose(len(window_frames(300, (0.0, None), 30.0)), 300)
