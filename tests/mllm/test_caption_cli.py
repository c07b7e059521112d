"""`vlr caption` end to end on a tiny random Qwen2-VL and test-made videos: the file holds one
caption per video (nonsense text, the captioner's), a resume skips what is there, and a run
SIGKILLed mid-way then resumed leaves every video captioned exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("torchvision")
pytest.importorskip("av")

from _tiny_mllm import save_model_folder, tiny_qwen2vl  # noqa: E402
from _videos import write_video  # noqa: E402

from vlr_plugins.cli import main  # noqa: E402
from vlr_plugins.mllm.caption_settings import load_caption_settings  # noqa: E402
from vlr_plugins.mllm.captioner import VideoCaptioner  # noqa: E402
from vlr_plugins.mllm.captions_file import settings_path_of  # noqa: E402

# tiny frames, and captions of a fixed length (the random model may emit its end token early)
SETTINGS = ("prompt: Describe the video in detail.\n"
            "video_input: {num_frames: 4, max_pixels: 3136}\n"
            "generation: {max_new_tokens: 24, min_new_tokens: 24, do_sample: false}\n")
NUM_VIDEOS = 10


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("caption")
    model, processor = tiny_qwen2vl(seed=5)
    folder = save_model_folder(root / "tiny-qwen2vl", model, processor)
    videos = root / "videos"
    videos.mkdir()
    for i in range(NUM_VIDEOS):
        write_video(videos / f"v{i:02d}", "ffv1", num_frames=12 + i)
    meta = root / "metadata.json"
    meta.write_text(json.dumps([{"video": f"v{i:02d}.mkv", "caption": "c", "spatial_caption": "s",
                                 "temporal_caption": "t"} for i in range(NUM_VIDEOS)]))
    settings = root / "tiny.yaml"
    settings.write_text(SETTINGS)
    # the reference: the captioner itself, one video at a time, in this process
    captioner = VideoCaptioner(model, processor, load_caption_settings(settings))
    reference = {f"v{i:02d}": captioner.caption([str(videos / f"v{i:02d}.mkv")])[0] for i in range(NUM_VIDEOS)}
    return dict(root=root, model=folder, videos=videos, meta=meta, settings=settings, reference=reference)


def argv(world, out, *extra):
    return ["caption", "--model", str(world["model"]), "--benchmark", "carebench", "--annotations",
            str(world["meta"]), "--videos", str(world["videos"]), "--settings", str(world["settings"]),
            "--out", str(out), "--no-progress", *extra]


def records(path):
    return [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines()]


def test_every_video_is_captioned_as_the_captioner_does(world, tmp_path):
    out = tmp_path / "caps.jsonl"
    assert main(argv(world, out, "--limit", "4")) == 0
    assert records(out) == [{"id": f"v{i:02d}", "caption": world["reference"][f"v{i:02d}"]} for i in range(4)]
    assert all(len(r["caption"]) > 0 for r in records(out))
    assert json.loads(settings_path_of(out).read_text())["video_input"]["num_frames"] == 4
    first = records(out)
    # the rest, resumed in batches of 3: nothing captioned twice, the first four untouched
    assert main(argv(world, out, "--resume", "--batch-size", "3")) == 0
    got = records(out)
    assert [r["id"] for r in got] == [f"v{i:02d}" for i in range(NUM_VIDEOS)]
    assert got[:4] == first
    assert {r["id"]: r["caption"] for r in got} == world["reference"]
    # another prompt is another run: refused on that file
    assert main(argv(world, out, "--resume", "--prompt", "Say what happens.")) == 2


def test_the_model_dtype_is_recorded_and_a_resume_at_another_is_refused(world, tmp_path, capsys):
    out = tmp_path / "caps.jsonl"
    assert main(argv(world, out, "--limit", "1", "--dtype", "float32")) == 0
    assert json.loads(settings_path_of(out).read_text())["model_dtype"] == "float32"
    assert main(argv(world, out, "--resume", "--limit", "2", "--model-dtype", "auto")) == 0  # the folder's float32
    assert [r["id"] for r in records(out)] == ["v00", "v01"]
    capsys.readouterr()
    assert main(argv(world, out, "--resume", "--model-dtype", "bfloat16")) == 2
    assert "model_dtype was 'float32', now 'bfloat16'" in capsys.readouterr().err
    assert [r["id"] for r in records(out)] == ["v00", "v01"]


def test_a_run_killed_with_sigkill_resumes_without_duplicates(world, tmp_path):
    out = tmp_path / "caps.jsonl"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, "-c", "import sys; from vlr_plugins.cli import main; "
                              "sys.exit(main(sys.argv[1:]))", *argv(world, out)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and child.poll() is None:
        if out.exists() and out.read_bytes().count(b"\n") >= 2:
            break
        time.sleep(0.02)
    assert child.poll() is None, f"the run ended before it was killed: {child.stderr.read().decode()[-2000:]}"
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    killed_at = out.read_bytes().count(b"\n")
    assert 2 <= killed_at < NUM_VIDEOS
    assert main(argv(world, out, "--resume")) == 0
    got = records(out)
    ids = [r["id"] for r in got]
    assert len(ids) == len(set(ids)) == NUM_VIDEOS
    assert {r["id"]: r["caption"] for r in got} == world["reference"]


def test_a_folder_of_videos_and_one_that_cannot_be_decoded(world, tmp_path):
    videos = tmp_path / "videos"
    videos.mkdir()
    for name in ("v00.mkv", "v01.mkv"):
        (videos / name).write_bytes((world["videos"] / name).read_bytes())
    (videos / "broken.mp4").write_bytes(b"not a video")
    out = tmp_path / "caps.jsonl"
    base = ["caption", "--model", str(world["model"]), "--videos", str(videos), "--settings",
            str(world["settings"]), "--out", str(out), "--no-progress"]
    assert main(base) == 1  # one video failed
    assert {r["id"]: r["caption"] for r in records(out)} == {k: world["reference"][k] for k in ("v00", "v01")}
    failures = records(str(out) + ".failures.jsonl")
    assert [f["id"] for f in failures] == ["broken"] and "broken.mp4" in failures[0]["error"]
