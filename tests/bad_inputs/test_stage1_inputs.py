"""The bad-input catalogue for `vlr train care/stage1`: bad (video, caption) records and recipe values,
refused with the file, line and field (or the key) and no work folder left behind."""

from __future__ import annotations

import json

import pytest
from _refusal import assert_refused

pytest.importorskip("mmengine.registry")
pytest.importorskip("transformers")
pytest.importorskip("torchvision")
pytest.importorskip("av")
from _tiny_mllm import save_tiny_qwen2vl, write_clip  # noqa: E402

CPU = ["model.gradient_checkpointing=false", "train_dataloader.batch_size=1",
       "train_dataloader.num_workers=0", "train_dataloader.persistent_workers=false",
       "train_dataloader.dataset.num_frames=2", "train_dataloader.dataset.max_pixels=3136", "train_cfg.max_iters=1",
       "optim_wrapper={type: OptimWrapper, optimizer: {type: AdamW, lr: 0.001}}"]
GOOD = {"video": "v.mkv", "caption": "A grey square."}


def _experiment(tmp_path):
    # MMEngine keeps one visualizer per experiment name (default: the start second) in the
    # process; runs of one second would share it, and its files, across work folders
    return f"experiment_name=stage1_{tmp_path.name}"


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return str(save_tiny_qwen2vl(tmp_path_factory.mktemp("tiny_qwen2vl"), seed=1))


@pytest.mark.parametrize("record, where", [
    ({"caption": "x"}, ["caps.jsonl, line 2, field 'video'", "missing"]),
    ({"video": ["v.mkv"], "caption": "x"}, ["caps.jsonl, line 2, field 'video'", "list"]),
    ({"video": "v.mkv", "caption": 3}, ["caps.jsonl, line 2, field 'caption'", "expected a string, found int"]),
    ({"video": "v.mkv", "caption": ""}, ["caps.jsonl, line 2, field 'caption'", "empty"]),
    ({"video": "v.mkv", "caption": "x", "text": "y"}, ["caps.jsonl, line 2, field 'text'", "unknown field"]),
    ({"video": "gone.mkv", "caption": "x"}, ["caps.jsonl, line 2, field 'video'", "no such file", "gone.mkv"]),
    ({"video": "broken.mkv", "caption": "x"}, ["caps.jsonl, line 2, field 'video'", "cannot read the video"]),
    ({"video": "v.mkv", "caption": "x", "start": 5.0}, ["caps.jsonl, line 2, field 'video'", "starts after"]),
], ids=["missing-video", "video-type", "caption-type", "empty-caption", "unknown-field", "missing-file",
        "unreadable-video", "moment-past-the-end"])
def test_bad_caption_records_are_refused(tmp_path, tiny_folder, record, where):
    write_clip(tmp_path / "v.mkv", num_frames=8, height=32, width=32)  # 1 s at 8 fps
    (tmp_path / "broken.mkv").write_bytes(b"\x1a\x45\xdf\xa3 not matroska")
    caps = tmp_path / "caps.jsonl"
    caps.write_text(json.dumps(GOOD) + "\n" + json.dumps(record) + "\n")
    work = tmp_path / "run"
    argv = ["train", "care/stage1", "--train", caps, "--work-dir", work, "--set", f"model.pretrained={tiny_folder}",
            f"train_dataloader.dataset.processor={tiny_folder}", *CPU, _experiment(tmp_path)]
    if record.get("video") == "broken.mkv" or "start" in record:
        # found when the item is decoded, not when the file is read: train in order over both records
        argv += ["train_dataloader.sampler={type: DefaultSampler, shuffle: false}", "train_cfg.max_iters=2"]
    assert_refused(argv, *where, leaves=[work], cwd=tmp_path)


@pytest.mark.parametrize("setting, where", [
    ("train_dataloader.dataset.num_frames=0", ["num_frames must be an integer >= 1, found 0"]),
    ("train_dataloader.dataset.max_pixels=-5", ["max_pixels", "-5"]),
    ("model.finetune=partial", ["finetune must be one of", "'partial'"]),
], ids=["num-frames", "max-pixels", "finetune"])
def test_bad_recipe_values_are_refused(tmp_path, tiny_folder, setting, where):
    write_clip(tmp_path / "v.mkv", num_frames=8, height=32, width=32)
    caps = tmp_path / "caps.jsonl"
    caps.write_text(json.dumps(GOOD) + "\n")
    work = tmp_path / "run"
    assert_refused(["train", "care/stage1", "--train", caps, "--work-dir", work, "--set",
                    f"model.pretrained={tiny_folder}", f"train_dataloader.dataset.processor={tiny_folder}", *CPU,
                    _experiment(tmp_path), setting], *where, leaves=[work], cwd=tmp_path)


def test_values_left_to_the_run_are_named(tmp_path):
    work = tmp_path / "run"
    assert_refused(["train", "care/stage1", "--work-dir", work], "model.pretrained",
                   "train_dataloader.dataset.processor", "--train FILE", leaves=[work], cwd=tmp_path)
