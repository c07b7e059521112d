"""Decoding: exact frame counts, the exact frames asked for, both backends, bad files."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch

from vlr_plugins.data.video import (
    VideoDecodeError,
    frame_indices,
    read_frames,
    sample_frames,
    video_info,
    window_frames,
)
from vlr_plugins.errors import DataFormatError

av = pytest.importorskip("av")

from _videos import (  # noqa: E402
    AWKWARD,
    FORMATS,
    TOLERANCE,
    nearest_written_frame,
    torchcodec_missing,
    video_frames,
    write_audio_only,
    write_awkward_video,
    write_video,
)

N = 40
BACKENDS = ["pyav", pytest.param("torchcodec", marks=pytest.mark.skipif(
    torchcodec_missing() is not None, reason=str(torchcodec_missing())))]


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    root = tmp_path_factory.mktemp("videos")
    return {fmt: write_video(root / fmt, fmt, N) for fmt in FORMATS}


def decode_everything(path):
    """The plain reference: PyAV decoding the whole stream from the start, in order."""
    with av.open(path) as container:
        return torch.from_numpy(np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)]))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", sorted(TOLERANCE))
def test_decoded_frames_equal_the_written_ones(videos, fmt, backend):
    written = torch.from_numpy(video_frames(N)).int()
    frames = read_frames(videos[fmt], backend=backend)
    assert frames.shape == (N, 48, 64, 3) and frames.dtype == torch.uint8
    assert (frames.int() - written).abs().max() <= TOLERANCE[fmt]


@pytest.mark.parametrize("backend", BACKENDS)
def test_lossy_frames_are_the_decoders_and_each_is_nearest_its_own(videos, backend):
    path = videos["h264_lossy"]
    frames = read_frames(path, backend=backend)
    assert torch.equal(frames, decode_everything(path))
    assert [nearest_written_frame(f.numpy(), N) for f in frames] == list(range(N))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_any_indices_in_any_order_give_exactly_those_frames(videos, fmt, backend):
    reference = decode_everything(videos[fmt])
    draw = random.Random(fmt)
    for _ in range(12):
        indices = [draw.randrange(N) for _ in range(draw.randint(1, 9))]
        assert torch.equal(read_frames(videos[fmt], indices, backend=backend), reference[indices]), indices
    assert torch.equal(read_frames(videos[fmt], [N - 1, 0, 5, 5], backend=backend), reference[[N - 1, 0, 5, 5]])
    assert read_frames(videos[fmt], [], backend=backend).shape == (0, 48, 64, 3)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_video_info_counts_frames_even_when_the_header_does_not(videos, fmt, backend):
    with av.open(videos[fmt]) as container:
        header_count = container.streams.video[0].frames
    if fmt in ("ffv1", "vp9"):
        assert header_count == 0  # Matroska / WebM: no count in the header
    info = video_info(videos[fmt], backend=backend)
    assert (info.num_frames, info.fps, info.width, info.height) == (N, 24.0, 64, 48)
    assert info.duration == pytest.approx(N / 24)


def test_frame_times_are_the_decoded_frames_times(videos, tmp_path):
    from vlr_plugins.data.video._pyav import frame_times

    for fmt, path in videos.items():
        with av.open(path) as container:
            decoded = [float(f.time) for f in container.decode(video=0)]
        assert frame_times(path) == pytest.approx(decoded, abs=1e-9), fmt
    assert frame_times(write_awkward_video(tmp_path / "shared", "shared_pts")) is None  # known only by counting
    with pytest.raises(VideoDecodeError, match="no video stream"):
        frame_times(write_audio_only(tmp_path / "sound.wav"))


def _torchcodec_alone_reads(path, index_sets, reference) -> bool:
    """Whether torchcodec's own decoder, opened afresh for each set, gives exactly its frames."""
    from torchcodec.decoders import VideoDecoder

    for indices in index_sets:
        try:
            got = VideoDecoder(path, seek_mode="exact", dimension_order="NHWC").get_frames_at(sorted(set(indices)))
        except RuntimeError:
            return False
        if not torch.equal(got.data, reference[sorted(set(indices))]):
            return False
    return True


@pytest.mark.skipif(torchcodec_missing() is not None, reason=str(torchcodec_missing()))
@pytest.mark.parametrize("kind", sorted(AWKWARD))
def test_torchcodecs_frames_are_checked_and_what_it_gets_wrong_pyav_reads(tmp_path, kind):
    """Files torchcodec did not read right here (its module's docstring): the backend still
    returns exactly the frames asked for, and says (once a file) where PyAV read them."""
    from vlr_plugins.data.video import VideoBackendWarning

    path = write_awkward_video(tmp_path / kind, kind)
    reference = decode_everything(path)
    n = len(reference)
    draw = random.Random(kind)
    index_sets = [[i] for i in range(n)] + [draw.sample(range(n), draw.randint(2, 9)) for _ in range(10)]
    index_sets.append(list(range(n)))
    alone = _torchcodec_alone_reads(path, index_sets, reference)
    warned = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert video_info(path, backend="torchcodec").num_frames == n
        for indices in index_sets:
            assert torch.equal(read_frames(path, indices, backend="torchcodec"), reference[indices]), indices
        warned = [w for w in caught if issubclass(w.category, VideoBackendWarning)]
    if kind == "shared_pts":  # frames known only by counting: PyAV reads it whatever torchcodec does
        assert warned and all("share timestamps" in str(w.message) for w in warned)
    else:
        assert bool(warned) == (not alone), [str(w.message) for w in warned[:2]]
    assert all(str(w.message).startswith(f"{path}: torchcodec ") for w in warned)


@pytest.mark.skipif(torchcodec_missing() is not None, reason=str(torchcodec_missing()))
def test_torchcodec_reads_the_usual_files_itself(videos):
    from vlr_plugins.data.video import VideoBackendWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", VideoBackendWarning)
        for path in videos.values():
            assert torch.equal(read_frames(path, backend="torchcodec"), decode_everything(path))


def test_pyav_seeks_instead_of_decoding_from_the_start(videos):
    from vlr_plugins.data.video._pyav import PyAVVideo

    # keyframes every 8 frames: frame 35 is decoded from keyframe 32: 32, 33, 34, 35
    with PyAVVideo(videos["h264_lossy"]) as video:
        opened = video.frames_decoded  # the first frame, decoded on opening for its size
        frame = video.read([35])[35]
        assert video.frames_decoded - opened <= 5  # 4, and one more the decoder may hand back early
    assert torch.equal(frame, decode_everything(videos["h264_lossy"])[35])


def test_a_stream_without_timestamps_is_counted_and_read_by_decoding(tmp_path):
    # a raw H.264 elementary stream: no container, no pts on its packets
    path = str(tmp_path / "raw.h264")
    with av.open(path, "w", format="h264") as container:
        stream = container.add_stream("libx264", rate=24)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv444p"
        stream.options = dict(FORMATS["h264"]["options"])
        for frame in video_frames(N):
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    assert video_info(path).num_frames == N
    frames = read_frames(path, [30, 3, 30])
    assert (frames.int() - torch.from_numpy(video_frames(N)[[30, 3, 30]]).int()).abs().max() <= TOLERANCE["h264"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("degrees", [90, -90, 180])
def test_phone_videos_are_turned_upright_by_their_display_rotation(tmp_path, degrees, backend):
    path = str(tmp_path / f"rotated{degrees}.mp4")
    with av.open(path, "w") as container:
        stream = container.add_stream("libx264", rate=24)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv444p"
        stream.options = dict(FORMATS["h264"]["options"])
        stream.set_display_rotation(degrees)  # counter-clockwise, as players show it
        for frame in video_frames(10):
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    upright = torch.from_numpy(np.rot90(video_frames(10), degrees // 90, axes=(1, 2)).copy())
    frames = read_frames(path, [0, 7], backend=backend)
    assert frames.shape == upright[[0, 7]].shape
    assert (frames.int() - upright[[0, 7]].int()).abs().max() <= TOLERANCE["h264"]
    info = video_info(path, backend=backend)
    assert (info.height, info.width) == tuple(upright.shape[1:3])


@pytest.mark.parametrize("backend", BACKENDS)
def test_sample_frames_decodes_the_sampled_indices(videos, backend):
    path = videos["h264"]
    reference = decode_everything(path)
    for strategy in ("rand", "middle", "uniform"):
        got = sample_frames(path, 16, strategy, seed=4, backend=backend)
        assert torch.equal(got, reference[frame_indices(N, 16, strategy, seed=4)])
    got = sample_frames(path, None, "fps", fps=6.0, backend=backend)  # every 4th frame at 24 fps
    assert torch.equal(got, reference[frame_indices(N, None, "fps", fps=6.0, video_fps=24.0)])
    assert len(got) == 10


def _sample_in_child(path, backend, out):
    out.put(sample_frames(path, 4, "middle", backend=backend).numpy())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fmt", ["h264", "h264_lossy"])
def test_a_process_forked_after_frames_were_converted_decodes_them_too(videos, fmt, backend):
    """A DataLoader worker is forked from a process that has already converted frames, here
    with PyAV's own per-thread scaler and with this backend; under PyAV 18.1.1 the forked
    worker used to hang on its first frame, in the scaler it had inherited."""
    import multiprocessing

    path = videos[fmt]
    with av.open(path) as container:
        next(container.decode(video=0)).to_ndarray(format="rgb24")
    here = sample_frames(path, 4, "middle", backend=backend)
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_sample_in_child, args=(path, backend, out))
    child.start()
    try:
        there = out.get(timeout=60)
    except Exception:  # queue.Empty: the child hung or died
        pytest.fail(f"a forked process did not decode {path} in 60 s (exit code {child.exitcode})")
    finally:
        child.join(5)
        if child.is_alive():
            child.kill()
            child.join()
    assert torch.equal(torch.from_numpy(there), here)


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_sampling_lands_inside_the_window(videos, backend):
    window = (0.5, 1.0)  # frames 12..23 at 24 fps
    got = sample_frames(videos["h264"], 6, "rand", seed=0, window=window, backend=backend)
    shown = [nearest_written_frame(f.numpy(), N) for f in got]
    assert all(12 <= k <= 23 for k in shown) and shown == sorted(shown)
    assert list(window_frames(N, window, 24.0)) == list(range(12, 24))


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_of_range_indices_name_the_file_and_the_count(videos, backend):
    with pytest.raises(IndexError, match=rf"ffv1.mkv: frame index {N} out of range; the video has {N} frames"):
        read_frames(videos["ffv1"], [0, N], backend=backend)
    with pytest.raises(IndexError, match="frame index -1"):
        read_frames(videos["ffv1"], [-1], backend=backend)


# ---------------------------------------------------------------------------- bad files


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory, videos):
    root = tmp_path_factory.mktemp("bad")
    (root / "empty.mp4").write_bytes(b"")
    (root / "notes.mp4").write_text("this is text, not a video\n" * 20)
    (root / "folder.mp4").mkdir()
    write_audio_only(root / "sound.wav")
    # MP4 whose index (moov) is at the end: cut in half, the index is gone
    data = open(videos["h264"], "rb").read()
    (root / "cut.mp4").write_bytes(data[: len(data) // 2])
    # MP4 with its index first (faststart): cut in half, the index lists frames that are gone
    whole = write_video(root / "faststart", "h264", N, container_options={"movflags": "faststart"})
    data = open(whole, "rb").read()
    (root / "cut_faststart.mp4").write_bytes(data[: len(data) // 2])
    return root


BAD = {
    "missing.mp4": ("cannot open the video", "No such file or directory"),
    "empty.mp4": ("cannot open the video", "Invalid data found when processing input"),
    "notes.mp4": ("cannot open the video", "Invalid data found when processing input"),
    "folder.mp4": ("cannot open the video", "Is a directory"),
    "sound.wav": ("cannot open the video", "no video stream"),
    "cut.mp4": ("cannot open the video", "Invalid data found when processing input"),
    "cut_faststart.mp4": ("the video is truncated or damaged", rf"header lists {N} frames but the file holds only \d+"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_files_raise_a_data_format_error_naming_path_and_reason(bad_files, name, backend):
    problem, reason = BAD[name]
    path = str(bad_files / name)
    for call in (lambda: video_info(path, backend=backend), lambda: read_frames(path, [0], backend=backend),
                 lambda: sample_frames(path, 4, "middle", backend=backend)):
        with pytest.raises(VideoDecodeError, match=rf"^{path}: {problem} \({backend}\): .*{reason}") as e:
            call()
        assert isinstance(e.value, DataFormatError)
        assert e.value.path == path and e.value.backend == backend
        assert e.value.reason and e.value.reason in str(e.value)


def test_unknown_backend_is_refused(videos):
    with pytest.raises(ValueError, match="unknown video backend 'decord'; expected one of"):
        video_info(videos["h264"], backend="decord")


def test_torchcodec_that_cannot_load_is_an_import_error_not_a_bad_file(videos, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torchcodec.decoders", None)  # as when FFmpeg's libraries are missing
    with pytest.raises(ImportError, match="the 'torchcodec' video backend needs .* FFmpeg's shared libraries"):
        video_info(videos["h264"], backend="torchcodec")
