"""Video stores: rows, windows, workers, seeds, resume, interruption, kill -9, bad files and
benchmarks, through the library and through `vlr precompute --videos / --benchmarks`."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from vlr_plugins.data import EmbeddingStore, sample_frames, video_transform, work_dir_of
from vlr_plugins.errors import DataFormatError
from vlr_plugins.precompute import VideoItem, failures_path_of, list_videos, precompute_video_embeddings

pytest.importorskip("av")
pytest.importorskip("timm")

from _videos import write_audio_only, write_video  # noqa: E402

FRAMES = 4
TIMM_TOWER = dict(kind="timm", model_name="vit_tiny_patch16_224", img_size=32, depth=1, embed_dim=32, num_heads=2)
# a tower whose rows depend only on each video's own frames, whatever the batch; sleeps when asked
PLAIN_TOWER = textwrap.dedent(
    """
    import os, time
    import torch

    class Tower:
        image_mean, image_std, image_size, dim = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25), 16, 6

        def encode_video(self, frames):
            time.sleep(float(os.environ.get("VLR_TEST_TOWER_DELAY", "0")))
            return torch.stack([torch.cat([f.mean(dim=(0, 2, 3)), f.std(dim=(0, 2, 3))]) for f in frames])
    """
)


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    """Five short videos of different lengths, two in a subfolder."""
    root = tmp_path_factory.mktemp("clips")
    for i, name in enumerate(["a", "b", "c", "sub/d", "sub/e"]):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        write_video(root / name, "h264", 10 + 3 * i)
    return root


@pytest.fixture(scope="module")
def tower():
    from vlr_plugins.vision import FramePooledVideoEncoder

    torch.manual_seed(0)
    return FramePooledVideoEncoder(tower=dict(TIMM_TOWER)).eval()


def _reference(tower, path, window=None) -> torch.Tensor:
    """The plain way: sample, transform and encode one video on its own."""
    frames = sample_frames(path, FRAMES, "middle", window=window)
    clip = video_transform(False, tower.image_size, tower.image_mean, tower.image_std)(frames)
    with torch.no_grad():
        return tower.encode_video(clip[None])[0]


def _vlr(argv, cwd) -> tuple[int, str, str]:
    """`vlr ARGV` in this process, run in ``cwd``: (status, stdout, stderr)."""
    from vlr_plugins.cli import main

    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in argv])
            except SystemExit as e:
                code = e.code
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def plain_tower_module(tmp_path, monkeypatch):
    """``plain_tower_<n>:Tower`` importable from ``tmp_path`` (a fresh name per test: modules are cached)."""
    name = f"plain_tower_{abs(hash(str(tmp_path))) % 10**8}"
    (tmp_path / f"{name}.py").write_text(PLAIN_TOWER)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    yield f"{name}:Tower"
    sys.modules.pop(name, None)


def _rows(store: EmbeddingStore) -> torch.Tensor:
    return store.get(list(store.ids))


# --------------------------------------------------------------------------- precompute


def test_store_rows_are_the_tower_on_the_sampled_transformed_frames(clips, tower, tmp_path):
    store, failed = precompute_video_embeddings(tower, list_videos(clips), tmp_path / "store", frames=FRAMES,
                                                batch_size=2, num_workers=0, progress=False, meta={"encoder": "t"})
    assert failed == 0 and store.ids == ("a", "b", "c", "sub/d", "sub/e")
    expected = torch.stack([_reference(tower, clips / f"{i}.mp4") for i in store.ids])
    torch.testing.assert_close(_rows(store), expected, rtol=0, atol=1e-5)
    assert store.meta == {"encoder": "t", "media": "video", "frames": FRAMES, "sampler": "middle", "seed": None,
                          "backend": "pyav", "transform": {"size": 32, "resize": "center_crop",
                                                           "mean": list(tower.image_mean),
                                                           "std": list(tower.image_std)}}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]  # no work folder, no failures file


def test_a_clip_of_a_longer_video_is_encoded_from_its_window(clips, tower, tmp_path):
    items = [VideoItem("c#late", clips / "c.mp4", 0.3, None), VideoItem("c#early", clips / "c.mp4", 0.0, 0.2)]
    store, _ = precompute_video_embeddings(tower, items, tmp_path / "store", frames=FRAMES, num_workers=0,
                                           progress=False)
    expected = torch.stack([_reference(tower, clips / "c.mp4", window=(0.3, None)),
                            _reference(tower, clips / "c.mp4", window=(0.0, 0.2))])
    torch.testing.assert_close(_rows(store), expected, rtol=0, atol=1e-5)
    assert not torch.allclose(expected[0], expected[1])

    beyond = [VideoItem("c#after", clips / "c.mp4", 60.0, None), *items]
    store, failed = precompute_video_embeddings(tower, beyond, tmp_path / "other", frames=FRAMES, num_workers=0,
                                                progress=False)
    assert failed == 1 and store.ids == ("c#late", "c#early")
    failure = json.loads(failures_path_of(tmp_path / "other").read_text())
    assert failure["id"] == "c#after" and "starts after the video's end" in failure["reason"]


@pytest.mark.parametrize("sampler", ["middle", "rand"])
def test_dataloader_workers_0_and_2_give_the_same_store(clips, tower, tmp_path, sampler):
    stores = [precompute_video_embeddings(tower, list_videos(clips), tmp_path / f"w{n}", frames=FRAMES,
                                          sampler=sampler, batch_size=2, num_workers=n, progress=False)[0]
              for n in (0, 2)]
    assert stores[0].ids == stores[1].ids
    assert torch.equal(_rows(stores[0]), _rows(stores[1]))
    assert stores[0].meta == stores[1].meta


def test_rand_draws_each_videos_frames_from_the_seed(clips, tower, tmp_path):
    def run(name, seed):
        return _rows(precompute_video_embeddings(tower, list_videos(clips), tmp_path / name, frames=FRAMES,
                                                 sampler="rand", seed=seed, num_workers=0, progress=False)[0])

    first, again, other = run("s0", 0), run("s0b", 0), run("s1", 1)
    assert torch.equal(first, again) and not torch.allclose(first, other)
    assert EmbeddingStore(tmp_path / "s1").meta["seed"] == 1


class _Counting:
    """A tower that counts the videos it is given (the thing counted is the work done, not mocked)."""

    def __init__(self, tower):
        self.tower, self.videos = tower, 0
        self.image_mean, self.image_std, self.image_size = tower.image_mean, tower.image_std, tower.image_size
        self.embed_dim = tower.embed_dim

    def encode_video(self, frames):
        self.videos += frames.shape[0]
        return self.tower.encode_video(frames)


def test_resume_encodes_only_the_videos_not_stored_yet(clips, tower, tmp_path):
    everything = list_videos(clips)
    counting = _Counting(tower)
    options = dict(frames=FRAMES, num_workers=0, progress=False, meta={"encoder": "t"}, batch_size=2)
    first, _ = precompute_video_embeddings(counting, everything[:3], tmp_path / "store", **options)
    kept = _rows(first)
    assert counting.videos == 3

    with pytest.raises(FileExistsError, match="resume=True"):
        precompute_video_embeddings(counting, everything, tmp_path / "store", **options)
    store, failed = precompute_video_embeddings(counting, everything, tmp_path / "store", resume=True, **options)
    assert counting.videos == 3 + 2 and failed == 0
    assert store.ids == tuple(v.id for v in everything)
    assert torch.equal(store.get(list(first.ids)), kept)
    precompute_video_embeddings(counting, everything, tmp_path / "store", resume=True, **options)
    assert counting.videos == 5  # nothing left to do


def test_bad_files_are_listed_with_path_and_reason_and_the_rest_stored(clips, tower, tmp_path):
    folder = tmp_path / "videos"
    shutil.copytree(clips, folder)
    (folder / "empty.mp4").write_bytes(b"")
    (folder / "notes.mp4").write_text("this is text, not a video\n" * 20)
    data = (folder / "b.mp4").read_bytes()
    (folder / "cut.mp4").write_bytes(data[: len(data) // 2])
    write_audio_only(folder / "sound.wav")
    os.replace(folder / "sound.wav", folder / "sound.mp4")
    store, failed = precompute_video_embeddings(tower, list_videos(folder), tmp_path / "store", frames=FRAMES,
                                                batch_size=3, num_workers=2, progress=False)
    assert failed == 4 and store.ids == ("a", "b", "c", "sub/d", "sub/e")
    lines = [json.loads(line) for line in failures_path_of(tmp_path / "store").read_text().splitlines()]
    reasons = {r["id"]: r for r in lines}
    assert sorted(reasons) == ["cut", "empty", "notes", "sound"]
    assert reasons["empty"]["path"] == str(folder / "empty.mp4") and reasons["empty"]["backend"] == "pyav"
    assert "Invalid data found" in reasons["empty"]["reason"] and "no video stream" in reasons["sound"]["reason"]
    assert all(r["error"].startswith(r["path"]) and r["reason"] in r["error"] for r in lines)


class _Interrupted(_Counting):
    """A tower whose run is stopped with Ctrl-C at its second batch."""

    def encode_video(self, frames):
        if self.videos:
            raise KeyboardInterrupt
        return super().encode_video(frames)


def test_an_interrupted_run_keeps_its_rows_and_failures_for_resume(clips, tower, tmp_path):
    items = [VideoItem("broken", tmp_path / "broken.mp4"), *list_videos(clips)]
    (tmp_path / "broken.mp4").write_bytes(b"")
    options = dict(frames=FRAMES, num_workers=0, progress=False, batch_size=3, flush_rows=100, meta={"encoder": "t"})
    with pytest.raises(KeyboardInterrupt):
        precompute_video_embeddings(_Interrupted(tower), items, tmp_path / "store", **options)
    assert [json.loads(x)["id"] for x in failures_path_of(tmp_path / "store").read_text().splitlines()] == ["broken"]
    assert not (tmp_path / "store").exists()
    counting = _Counting(tower)
    store, failed = precompute_video_embeddings(counting, items, tmp_path / "store", resume=True, **options)
    assert counting.videos == 3 and failed == 1  # the first batch's two good videos were kept
    assert store.ids == ("a", "b", "c", "sub/d", "sub/e")


def test_the_command_offers_the_samplers_and_backends_of_the_library():
    from vlr_plugins.cli import build_parser
    from vlr_plugins.precompute import VIDEO_SAMPLERS
    from vlr_plugins.data.video import VIDEO_BACKENDS

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["precompute"]
    choices = {a.dest: tuple(a.choices) for a in sub._actions if a.choices}
    assert choices["sampler"] == VIDEO_SAMPLERS and choices["backend"] == VIDEO_BACKENDS


def test_when_no_video_decodes_only_the_failures_are_written(tmp_path, tower):
    (tmp_path / "bad.mp4").write_bytes(b"")
    with pytest.raises(DataFormatError, match=r"store\.failures\.jsonl: lists all 1 videos: none could be decoded"):
        precompute_video_embeddings(tower, [VideoItem("bad", tmp_path / "bad.mp4")], tmp_path / "store",
                                    num_workers=0, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.mp4", "store.failures.jsonl"]


# --------------------------------------------------------------------------- the command


def test_vlr_precompute_videos_reports_failures_and_exits_1_then_resume_finishes(clips, tmp_path,
                                                                                plain_tower_module):
    shutil.copytree(clips, tmp_path / "videos")
    (tmp_path / "videos" / "broken.mp4").write_bytes(b"\x00" * 100)
    argv = ["precompute", "--videos", "videos", "--encoder", plain_tower_module, "--out", "store",
            "--frames", FRAMES, "--workers", 0]
    code, out, err = _vlr(argv, tmp_path)
    assert code == 1, err  # partial: the store holds the others
    assert "wrote 5 embeddings of dim 6 to store" in out
    assert "error: 1 of 6 videos could not be decoded" in err and "store.failures.jsonl" in err
    assert [json.loads(x)["id"] for x in (tmp_path / "store.failures.jsonl").read_text().splitlines()] == ["broken"]

    (tmp_path / "videos" / "broken.mp4").unlink()
    write_video(tmp_path / "videos" / "broken", "h264", 9)  # fixed
    code, _, err = _vlr(argv, tmp_path)
    assert code == 2 and "--resume" in err  # a store is there
    code, out, err = _vlr(argv + ["--resume"], tmp_path)
    assert code == 0, err
    store = EmbeddingStore(tmp_path / "store")
    assert store.ids == ("a", "b", "c", "sub/d", "sub/e", "broken")
    assert not (tmp_path / "store.failures.jsonl").exists()
    assert store.meta["encoder"] == plain_tower_module and store.meta["frames"] == FRAMES


def test_vlr_precompute_exits_2_when_no_video_decodes(tmp_path, plain_tower_module):
    (tmp_path / "videos").mkdir()
    for name in ("x", "y"):
        (tmp_path / "videos" / f"{name}.mp4").write_bytes(b"\x00" * 100)
    code, out, err = _vlr(["precompute", "--videos", "videos", "--encoder", plain_tower_module, "--out", "store",
                           "--frames", FRAMES, "--workers", 0], tmp_path)
    assert code == 2, (out, err)  # nothing could be done: not a partial run (exit 1)
    assert "lists all 2 videos: none could be decoded" in err and "no store was written" in err
    assert not (tmp_path / "store").exists()
    assert [json.loads(x)["id"] for x in (tmp_path / "store.failures.jsonl").read_text().splitlines()] == ["x", "y"]


KILLED_RUN = textwrap.dedent(
    """
    import sys
    from vlr_plugins.precompute import list_videos, precompute_video_embeddings
    from vlr_plugins.specs import load_video_encoder

    tower_spec = sys.argv[1]
    precompute_video_embeddings(load_video_encoder(tower_spec), list_videos("videos"), "store", frames=4,
                                batch_size=1, num_workers=0, flush_rows=1, progress=False,
                                meta={"encoder": tower_spec})
    """
)


def test_kill_9_mid_run_then_resume_gives_the_clean_runs_store(clips, tmp_path, plain_tower_module):
    (tmp_path / "videos").mkdir()
    for i in range(3):  # eight videos
        write_video(tmp_path / "videos" / f"extra{i}", "h264", 11)
    for p in clips.rglob("*.mp4"):
        dest = tmp_path / "videos" / p.relative_to(clips)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, dest)
    (tmp_path / "killed.py").write_text(KILLED_RUN)
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{tmp_path}", "PYTHONDONTWRITEBYTECODE": "1",
           "VLR_TEST_TOWER_DELAY": "0.5"}
    proc = subprocess.Popen([sys.executable, "killed.py", plain_tower_module], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    work = work_dir_of(tmp_path / "store")
    deadline = time.monotonic() + 120
    while len(list(work.glob("embeddings-*.safetensors"))) < 2:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "no part became durable"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert not (tmp_path / "store").exists() and 2 <= len(list(work.glob("embeddings-*"))) < 8

    argv = ["precompute", "--videos", "videos", "--encoder", plain_tower_module, "--frames", FRAMES,
            "--workers", 0]
    code, _, err = _vlr(argv + ["--out", "store"], tmp_path)
    assert code == 2 and "--resume" in err and "interrupted run" in err
    code, _, err = _vlr(argv + ["--out", "store", "--resume"], tmp_path)
    assert code == 0, err
    code, _, err = _vlr(argv + ["--out", "clean"], tmp_path)
    assert code == 0, err

    resumed, clean = EmbeddingStore(tmp_path / "store"), EmbeddingStore(tmp_path / "clean")
    assert resumed.ids == clean.ids and len(set(resumed.ids)) == len(resumed.ids) == 8
    assert torch.equal(_rows(resumed), _rows(clean))
    assert resumed.meta == clean.meta
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".") or "failures" in p.name]


MSRVTT_CSV = """key,vid_key,video_id,sentence
ret0,msr7579,video7579,a girl is putting a sweater on a dog
ret1,msr7725,video7725,young people sit around the edges of a room clapping
ret2,msr9258,video9258,"a man is talking, then he sings"
"""


def test_vlr_precompute_benchmarks_stores_the_ids_the_reader_gives(tmp_path, plain_tower_module):
    from vlr_plugins.data.readers import read_msrvtt
    from vlr_plugins.eval.benchmarks import load_benchmark_specs

    (tmp_path / "MSRVTT_JSFUSION_test.csv").write_text(MSRVTT_CSV)
    (tmp_path / "MSRVTT" / "videos").mkdir(parents=True)
    for i, video_id in enumerate(["video7579", "video7725", "video9258"]):
        write_video(tmp_path / "MSRVTT" / "videos" / video_id, "h264", 10 + i)
    (tmp_path / "bench.yaml").write_text(
        "benchmarks:\n"
        "  - {name: msrvtt, reader: msrvtt, path: MSRVTT_JSFUSION_test.csv, item_embeddings: stores/videos,\n"
        "     args: {media_root: MSRVTT/videos}}\n"
        "  - {name: msrvtt-again, reader: msrvtt, path: MSRVTT_JSFUSION_test.csv, item_embeddings: stores/videos,\n"
        "     args: {media_root: MSRVTT/videos}}\n")
    code, _, err = _vlr(["precompute", "--benchmarks", "bench.yaml", "--encoder", plain_tower_module,
                           "--out", "stores/videos", "--frames", FRAMES, "--workers", 0], tmp_path)
    assert code == 0, err
    store = EmbeddingStore(tmp_path / "stores" / "videos")
    assert store.ids == read_msrvtt(tmp_path / "MSRVTT_JSFUSION_test.csv").item_ids  # shared items once
    assert [s.name for s in load_benchmark_specs(tmp_path / "bench.yaml")] == ["msrvtt", "msrvtt-again"]
