"""VideoClips (data/video_media.py): each sample's frames decoded and sampled per step, as the
core dataset's media source."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from _videos import nearest_written_frame, write_video

from vlr_plugins.data import MVCSample, TextView, TextViews, TextViewsDataset, VideoClips
from vlr_plugins.errors import DataFormatError, MissingFileError

pytest.importorskip("av")


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return write_video(tmp_path_factory.mktemp("clips") / "v.mkv", "ffv1", num_frames=32)


def _middles(num_frames: int, segments: int) -> list[int]:
    """UMT's ``middle`` rule (dataset/video_utils.py): the middle of each of N equal segments."""
    edges = np.linspace(0, num_frames, segments + 1).astype(int)
    return [(int(a) + int(b) - 1) // 2 for a, b in zip(edges[:-1], edges[1:])]


def _sample(path, **kw):
    return MVCSample(id="v", video=str(path), captions={"O": "a square moves"}, **kw)


def test_middle_sampler_reads_the_segment_middles(clip):
    frames = VideoClips(4, "middle").load(_sample(clip))
    assert frames.shape == (4, 48, 64, 3) and frames.dtype == torch.uint8
    assert [nearest_written_frame(f.numpy(), 32) for f in frames] == _middles(32, 4)  # lossless FFV1


def test_rand_sampler_one_frame_per_segment_seeded_by_torch(clip):
    clips = VideoClips(4, "rand")
    draws = []
    for seed in (1, 1, 2):
        torch.manual_seed(seed)
        draws.append([[nearest_written_frame(f.numpy(), 32) for f in clips.load(_sample(clip))] for _ in range(3)])
    assert draws[0] == draws[1] and draws[0] != draws[2]
    assert all(8 * s <= k < 8 * (s + 1) for run in draws for ks in run for s, k in enumerate(ks))


def test_window_and_transform(clip):
    # a window of the first second: frames 0..23 at 24 fps
    frames = VideoClips(3, "middle").load(_sample(clip, start=0.0, end=1.0))
    assert [nearest_written_frame(f.numpy(), 32) for f in frames] == _middles(24, 3)
    scaled = VideoClips(3, "middle", lambda t: t.float() / 255).load(_sample(clip))
    assert scaled.shape == (3, 48, 64, 3) and float(scaled.max()) <= 1.0


def test_in_the_core_dataset_and_picklable(clip):
    clips = VideoClips(2, "middle")
    views = TextViews((TextView("O", 16, name="summary"),))
    item = TextViewsDataset([_sample(clip)], views, pickle.loads(pickle.dumps(clips))).item(0)
    assert item.media.shape == (2, 48, 64, 3) and [d.text for d in item.positives] == ["a square moves"]


def test_missing_and_undecodable_files(tmp_path, clip):
    gone = [MVCSample(id=f"g{i}", video=str(tmp_path / f"g{i}.mp4"), captions={"O": "x"}) for i in range(2)]
    with pytest.raises(MissingFileError, match=r"2 of the 3 training videos.*g0\.mp4 \(sample 'g0'\)"):
        VideoClips(2).check([_sample(clip), *gone])
    VideoClips(2, check_files=False).check(gone)  # a slow file system may skip the look-up
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"not a video at all" * 10)
    with pytest.raises(DataFormatError, match=r"broken\.mp4.*cannot decode the video of sample 'b'"):
        VideoClips(2).load(MVCSample(id="b", video=str(broken), captions={"O": "x"}))


@pytest.mark.parametrize("args, words", [((0,), "frames must be a positive integer"),
                                         ((4, "fps"), "sampler must be one of"),
                                         ((4, "rand", None), None)])
def test_arguments(args, words):
    if words is None:
        assert VideoClips(*args).frames == 4
        return
    with pytest.raises(ValueError, match=words):
        VideoClips(*args)
