"""The bad-input catalogue for `vlr caption`: refused before any model is loaded (the model
named is not even there), naming the option or the file and key, and leaving no captions file."""

from __future__ import annotations

import json

import pytest
from _refusal import assert_refused


@pytest.fixture
def files(tmp_path):
    videos = tmp_path / "videos"
    videos.mkdir()
    (videos / "v0.mp4").write_bytes(b"\0")
    meta = tmp_path / "metadata.json"
    meta.write_text(json.dumps([{"video": "v0.mp4", "caption": "c", "spatial_caption": "s",
                                 "temporal_caption": "t"}]))
    return tmp_path


def _write(path, text):
    path.write_text(text)
    return str(path)


CASES = {
    "no-videos-folder": (lambda t: ["--videos", t / "nope"], ["--videos", "nope"]),
    "benchmark": (lambda t: ["--benchmark", "msrvtt"], ["--benchmark", "msrvtt"]),
    "benchmark-without-annotations": (lambda t: ["--benchmark", "carebench"], ["--annotations"]),
    "annotations-without-benchmark": (lambda t: ["--annotations", t / "metadata.json"], ["--annotations"]),
    "no-annotations-file": (lambda t: ["--benchmark", "carebench", "--annotations", t / "nope.json"],
                            ["--annotations", "nope.json"]),
    "annotations-not-json": (lambda t: ["--benchmark", "carebench", "--annotations", _write(t / "m.json", "[{")],
                             ["m.json"]),
    "video-missing": (lambda t: ["--benchmark", "carebench", "--annotations",
                                 _write(t / "m2.json", json.dumps([{"video": "gone.mp4", "caption": "c",
                                                                    "spatial_caption": "s",
                                                                    "temporal_caption": "t"}]))],
                      ["gone.mp4"]),
    "folder-without-videos": (lambda t: ["--videos", t], ["no video files"]),
    "settings-unknown": (lambda t: ["--settings", "carebenhc"], ["carebenhc"]),
    "settings-bad-key": (lambda t: ["--settings", _write(t / "s.yaml", "generation: {max_tokens: 3}\n")],
                         ["s.yaml", "generation.max_tokens"]),
    "empty-prompt": (lambda t: ["--prompt", " "], ["--prompt"]),
    "batch-size": (lambda t: ["--batch-size", "0"], ["--batch-size"]),
    "limit": (lambda t: ["--limit", "x"], ["--limit"]),
    "backend": (lambda t: ["--backend", "tgi"], ["--backend"]),
    "model-dtype": (lambda t: ["--model-dtype", "float64"], ["--model-dtype", "invalid choice: 'float64'"]),
    "out-is-a-folder": (lambda t: ["--out", t / "videos"], ["--out", "videos"]),
    "eol-prompt-in-model": (lambda t: ["--model", f"mllm:{t / 'no-model'}:care"], ["--model", "EOL prompt 'care'"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_caption_refuses_bad_input_before_loading_a_model(files, case):
    change, where = CASES[case]
    extra = [str(a) for a in change(files)]
    argv = ["caption", "--model", str(files / "no-model"), "--out", str(files / "caps.jsonl")]
    if "--videos" not in extra:
        argv += ["--videos", str(files / "videos")]
    leaves = [files / "caps.jsonl", files / "caps.jsonl.settings.json"]
    assert_refused([*argv, *extra], *where, leaves=leaves)


def test_an_existing_captions_file_needs_resume_or_overwrite(files):
    out = files / "caps.jsonl"
    out.write_text('{"id": "v0", "caption": "c"}\n')
    argv = ["caption", "--model", str(files / "no-model"), "--videos", str(files / "videos"), "--out", str(out)]
    assert_refused(argv, "caps.jsonl", "--resume", "--overwrite")
    assert_refused([*argv, "--resume", "--overwrite"], "--resume", "--overwrite")
    assert out.read_text() == '{"id": "v0", "caption": "c"}\n'


def test_a_model_that_is_not_there_is_named(files):
    argv = ["caption", "--model", str(files / "no-model"), "--videos", str(files / "videos"),
            "--out", str(files / "caps.jsonl")]
    assert_refused(argv, "no-model", leaves=[files / "caps.jsonl", files / "caps.jsonl.settings.json"])


def test_the_vllm_backend_is_refused_where_it_cannot_run(files):
    pytest.importorskip("torch")
    import importlib.util

    import torch

    if importlib.util.find_spec("vllm") is not None and torch.cuda.is_available():
        pytest.skip("vLLM and a GPU are here")
    argv = ["caption", "--model", str(files / "no-model"), "--videos", str(files / "videos"),
            "--out", str(files / "caps.jsonl"), "--backend", "vllm"]
    assert_refused(argv, "--backend vllm", leaves=[files / "caps.jsonl"])
