"""Which frames of a video a model sees: UMT's and CaReBench's sampling rules, seeded.

:func:`frame_indices` turns a frame count into the list of frame indices to decode, by a
named strategy. Every strategy works on the *candidate frames*: the whole video, or the
frames of a time window (a shot or a moment) when ``window=`` is given.

=========  ===============================================================  ==================
strategy   frames                                                           used by
=========  ===============================================================  ==================
``rand``   split into N equal segments, one random frame in each (seeded)   UMT / MVC training
``middle`` the middle frame of each of the N segments                       UMT evaluation
``uniform`` CaReBench's 32-frame rule, which is ``middle`` (see below)      CaRe evaluation
``fps``    one frame every ``1 / fps`` seconds, at most N                   UMT's ``fpsX``
=========  ===============================================================  ==================

Segments follow UMT (``multi_modality/dataset/video_utils.py``, ``get_frame_indices``):
the boundaries of L candidate frames in N segments are ``int(i * (L / N))`` for
i = 0..N-1 and L for the last (``np.linspace(0, L, N + 1).astype(int)``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, get_args

__all__ = ["CLIP_SAMPLERS", "ClipSampler", "FRAME_STRATEGIES", "frame_indices", "window_frames"]

#: the strategies that give every clip the same number of frames (``fps`` does not): how
#: training clips (a recipe's ``video.sampler``) and the rows of a video store are sampled
ClipSampler = Literal["rand", "middle", "uniform"]
CLIP_SAMPLERS: tuple[str, ...] = get_args(ClipSampler)
FRAME_STRATEGIES = (*CLIP_SAMPLERS, "fps")
# a window edge within this many frames of a frame's start counts as on it (float seconds)
_EDGE_EPS = 1e-6


def window_frames(num_video_frames: int, window: Sequence[float | None], video_fps: float) -> range:
    """The frames shown during ``window = (start, end)`` seconds, as a range of frame indices.

    Frame i is shown from ``i / video_fps`` to ``(i + 1) / video_fps``; the window keeps every
    frame shown for part of ``[start, end)``, so it is never empty when ``end > start``.
    ``end=None`` (or past the video's end) means the end of the video; a start before 0
    counts as 0. A window that starts at or after the video's end raises ``ValueError``.
    """
    if len(window) != 2:
        raise ValueError(f"window must be (start, end) in seconds, found {window!r}")
    start, end = window
    start = 0.0 if start is None else float(start)
    if video_fps is None or not video_fps > 0:
        raise ValueError(f"a window needs the video's frame rate (video_fps > 0), found {video_fps!r}")
    if end is not None and not float(end) > start:
        raise ValueError(f"window end must be after its start, found {window!r}")
    first = max(0, math.floor(start * video_fps + _EDGE_EPS))
    stop = num_video_frames
    if end is not None:
        stop = min(stop, math.ceil(float(end) * video_fps - _EDGE_EPS))
    if first >= num_video_frames:
        raise ValueError(f"window {tuple(window)!r} starts after the video's end "
                         f"({num_video_frames} frames at {video_fps:g} fps = "
                         f"{num_video_frames / video_fps:g} s)")
    return range(first, max(stop, first + 1))


def _segment_bounds(length: int, num_segments: int) -> list[int]:
    """UMT's boundaries: ``np.linspace(0, length, num_segments + 1).astype(int)``, without numpy."""
    step = length / num_segments
    return [int(i * step) for i in range(num_segments)] + [length]


def _pad_with_last(indices: list[int], num_samples: int) -> list[int]:
    return indices + [indices[-1]] * (num_samples - len(indices))


def _fps_offsets(length: int, video_fps: float, fps: float, cap: int | None) -> list[int]:
    """UMT's ``fps`` rule: times ``delta/2, 3 delta/2, ...`` before the end, rounded to frames."""
    duration = length / video_fps
    delta = 1.0 / fps
    start, stop = delta / 2, duration + delta / 2
    count = max(0, math.ceil((stop - start) / delta))  # np.arange's length
    # np.arange's values: start, start + delta, then start + j * ((start + delta) - start)
    step = (start + delta) - start
    times = [start + (delta if j == 1 else j * step) for j in range(count)]
    # round() rounds half to even, as np.around does
    offsets = [int(round(t * video_fps)) for t in times]
    offsets = [o for o in offsets if o < length]
    return offsets if cap is None else offsets[:cap]


def frame_indices(
    num_video_frames: int,
    num_samples: int | None,
    strategy: str = "middle",
    *,
    seed: int | None = None,
    fps: float | None = None,
    video_fps: float | None = None,
    window: Sequence[float | None] | None = None,
) -> list[int]:
    """Indices of the frames to decode, in increasing order, by a named sampling strategy.

    Args:
        num_video_frames: the video's exact frame count L (:func:`video_info`).
        num_samples: N, the number of frames wanted (MVC: 16 following UMT; CaReBench: 32).
            For ``fps`` it is the most frames kept (``None``: no limit).
        strategy: one of :data:`FRAME_STRATEGIES`:

            * ``rand`` -- the candidate frames split into N segments (UMT's boundaries,
              module docstring); one frame drawn uniformly from each segment. UMT draws with
              ``random.choice(range(start, end - 1))``, which never picks a segment's last
              frame and, when a segment holds one frame, falls back to N distinct random
              frames of the whole video; here every frame of a segment can be drawn and a
              one-frame segment gives that frame.
            * ``middle`` -- the middle frame of each segment, ``(start + end - 1) // 2``
              with ``end`` the next segment's start (UMT's ``middle``).
            * ``uniform`` -- CaReBench's rule for its 32 frames, exactly: its reader
              (``utils/video.py``, ``read_frames_decord``) defaults to UMT's ``middle``, so
              ``uniform`` gives the same frames as ``middle``; the name says which paper a
              configuration reproduces.
            * ``fps`` -- UMT's ``fpsX``: times ``d/2, 3d/2, ...`` seconds (``d = 1 / fps``)
              up to the candidate frames' duration, each rounded (half to even) to the frame
              ``round(t * video_fps)``; frames past the end dropped; when more than
              ``num_samples`` remain, the first ``num_samples`` are kept, as UMT does. May
              return fewer than ``num_samples``; never repeats frames.

        seed: for ``rand``: the same seed gives the same indices, whatever the global random
            state; ``None`` draws from torch's global generator (which a DataLoader seeds
            differently in each worker). Other strategies ignore it.
        fps: for ``fps``: frames per second to sample.
        video_fps: the video's frame rate; needed by ``fps`` and ``window``. Times are
            ``frame index / video_fps`` (a constant rate, as UMT and decord assume).
        window: ``(start, end)`` seconds: only the frames shown in this window are
            candidates (:func:`window_frames`); every strategy then runs on them as if they
            were the whole video. For a single shot (Shot2Story) or a moment (DiDeMo,
            ActivityNet Captions).

    Videos (or windows) shorter than N frames: every candidate frame once, in order, then
    the last one repeated up to N frames -- UMT's padding, for ``rand``, ``middle`` and
    ``uniform``.

    Example::

        frame_indices(100, 4, "middle")                  # [12, 37, 62, 87]
        frame_indices(100, 4, "rand", seed=0)            # one frame in each of 0-24, 25-49, ...
        frame_indices(300, 8, "middle", video_fps=30, window=(2.0, 4.0))  # frames 60-119 only
    """
    if strategy not in FRAME_STRATEGIES:
        raise ValueError(f"unknown frame sampling strategy {strategy!r}; expected one of {FRAME_STRATEGIES}")
    if int(num_video_frames) != num_video_frames or num_video_frames < 1:
        raise ValueError("a video needs at least one frame to sample from, "
                         f"found num_video_frames={num_video_frames!r}")
    if strategy != "fps" and (num_samples is None or num_samples < 1):
        raise ValueError(f"strategy {strategy!r} needs num_samples >= 1, found {num_samples!r}")
    if window is None:
        candidates = range(num_video_frames)
    else:
        candidates = window_frames(num_video_frames, window, video_fps)
    first, length = candidates.start, len(candidates)

    if strategy == "fps":
        if fps is None or not fps > 0 or video_fps is None or not video_fps > 0:
            raise ValueError("strategy 'fps' needs fps > 0 and video_fps > 0, "
                             f"found fps={fps!r}, video_fps={video_fps!r}")
        if num_samples is not None and num_samples < 1:
            raise ValueError(f"strategy 'fps' caps at num_samples >= 1 (or None), found {num_samples!r}")
        return [first + o for o in _fps_offsets(length, video_fps, fps, num_samples)]

    n = min(num_samples, length)
    bounds = _segment_bounds(length, n)
    starts, ends = bounds[:-1], bounds[1:]
    if strategy == "rand":
        import torch

        generator = None if seed is None else torch.Generator().manual_seed(seed)
        draws = torch.rand(n, generator=generator, dtype=torch.float64).tolist()
        offsets = [s + min(int(u * (e - s)), e - s - 1) for u, s, e in zip(draws, starts, ends)]
    else:  # middle, uniform
        offsets = [(s + e - 1) // 2 for s, e in zip(starts, ends)]
    return _pad_with_last([first + o for o in offsets], num_samples)
