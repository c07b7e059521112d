"""A video media source: each sample's frames decoded and sampled at every step, in the
data-loader workers (the video counterpart of :mod:`vlr_plugins.data.media`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

from vlr_plugins.data.video import CLIP_SAMPLERS, VIDEO_BACKENDS, VideoDecodeError, sample_frames
from vlr_plugins.errors import DataFormatError, MissingFileError

__all__ = ["VideoClips"]

_SHOWN = 20


class VideoClips:
    """Each sample's clip: ``frames`` frames of ``sample.video`` picked by ``sampler``, decoded,
    then ``transform`` -- ``(T, H, W, 3)`` uint8 -> what the model reads, e.g.
    :func:`~vlr_plugins.data.video_transform` ``(T, 3, S, S)``.

    Expects samples with ``id``, ``video`` (a path) and ``window`` (``(start, end)`` seconds
    of a clip of a longer video, or ``None``): :class:`~vlr_plugins.data.MVCSample`.

    ``sampler`` ``"rand"`` (UMT / MVC training: one random frame in each of N segments)
    draws anew at every step from torch's generator, which MMEngine and the DataLoader seed
    per worker, so a seeded run draws the same frames; ``"middle"`` / ``"uniform"`` are
    fixed. ``check(samples)`` asks that every sample names a video and, with
    ``check_files``, that every file exists (all missing ones reported at once, before
    the first step; a corpus of millions on a slow file system may skip it). A file that
    cannot be decoded, or a clip window past the video's end, stops the step with a
    :class:`~vlr_plugins.errors.DataFormatError` naming the file and the sample.

    Picklable (no open decoder), so it travels into data-loader workers.

    Example::

        clips = VideoClips(16, "rand", video_transform(True, 224, IMAGENET_MEAN, IMAGENET_STD))
        dataset = TextViewsDataset(read_mvc_samples("corpus.jsonl"), views, clips)
        dataset[0].media.shape   # (16, 3, 224, 224)
    """

    def __init__(self, frames: int, sampler: str = "rand", transform: Callable[[torch.Tensor], Any] | None = None,
                 *, backend: str = "pyav", check_files: bool = True) -> None:
        if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
            raise ValueError(f"frames must be a positive integer, found {frames!r}")
        if sampler not in CLIP_SAMPLERS:
            raise ValueError(f"sampler must be one of {CLIP_SAMPLERS} (each clip the same number of frames), "
                             f"found {sampler!r}")
        if backend not in VIDEO_BACKENDS:
            raise ValueError(f"backend must be one of {VIDEO_BACKENDS}, found {backend!r}")
        self.frames, self.sampler, self.transform = frames, sampler, transform
        self.backend, self.check_files = backend, check_files

    def check(self, samples: Sequence[Any]) -> None:
        nameless = [s.id for s in samples if not getattr(s, "video", None)]
        if nameless:
            shown = ", ".join(repr(i) for i in nameless[:_SHOWN])
            more = " ..." if len(nameless) > _SHOWN else ""
            raise ValueError(f"{len(nameless)} sample(s) name no video: {shown}{more}")
        if not self.check_files:
            return
        missing = [s for s in samples if not os.path.isfile(s.video)]
        if missing:
            shown = ", ".join(f"{s.video} (sample {s.id!r})" for s in missing[:_SHOWN])
            more = f", ... and {len(missing) - _SHOWN} more" if len(missing) > _SHOWN else ""
            raise MissingFileError(f"{len(missing)} of the {len(samples)} training videos are not there: {shown}{more}")

    def load(self, sample: Any) -> Any:
        try:
            frames = sample_frames(sample.video, self.frames, self.sampler, window=sample.window, backend=self.backend)
        except VideoDecodeError as e:
            raise DataFormatError(sample.video, f"cannot decode the video of sample {sample.id!r}: {e.problem}") from e
        except ValueError as e:  # a window that starts after the video's end
            raise DataFormatError(sample.video, f"sample {sample.id!r}: {e}") from e
        return self.transform(frames) if self.transform is not None else frames

    def __repr__(self) -> str:
        return f"VideoClips({self.frames}, {self.sampler!r}, {self.transform!r}, backend={self.backend!r})"
