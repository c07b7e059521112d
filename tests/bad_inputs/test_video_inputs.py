"""The bad-input catalogue of ``vlr precompute --videos / --benchmarks``.

Each row is a real bad input, written by the test into an empty folder (the command's
working directory): the files, the command line, and the words its one ``error:`` line
must hold to say where the problem is (file, line, field, option). Every case must exit 2
without a traceback (``_refusal.assert_refused``), leave no store, work folder or failures
file behind, and leave the folder exactly as it was.

Placeholders: ``{tmp}`` the case's folder, ``{videos}`` a folder of two short videos,
``{frames4}`` a finished store of ``{videos}`` written with ``tower.yaml`` and 4 frames.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from _refusal import assert_refused, fill, run_vlr, tree, write_files

pytest.importorskip("av")
pytest.importorskip("timm")

from _videos import write_video  # noqa: E402

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")

TOWER = ("type: FramePooledVideoEncoder\n"
         "tower: {kind: timm, model_name: vit_tiny_patch16_224, img_size: 32, depth: 1, embed_dim: 32, num_heads: 2}\n")
SPACE_TIME = ("type: SpaceTimeViT\nnum_frames: 4\nimage_size: 32\npatch_size: 16\ntubelet_size: 2\nwidth: 32\n"
              "depth: 1\nnum_heads: 2\n")
IMAGE_ENCODER = """
import torch

class MeanColor:
    dim = 3

    def __call__(self, images):
        return torch.stack([torch.tensor(im.getpixel((0, 0)), dtype=torch.float32) for im in images])
"""
WIDE_TOWER = """
class Wide:
    image_mean, image_std, image_size = (0.5,) * 3, (0.5,) * 3, (32, 48)

    def encode_video(self, frames):
        return frames.mean(dim=(1, 3, 4))
"""
MSRVTT_CSV = ("key,vid_key,video_id,sentence\nret0,msr7579,video7579,a girl and a dog\n"
              "ret1,msr7725,video7725,people clapping\nret2,msr9258,video9258,a man sings\n")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, str]:
    videos = tmp_path_factory.mktemp("videos")
    for name in ("a", "b"):
        write_video(videos / name, "h264", 12)
    made = tmp_path_factory.mktemp("made")
    (made / "tower.yaml").write_text(TOWER)
    code, _, err = run_vlr(["precompute", "--videos", videos, "--encoder", "tower.yaml", "--out", "store",
                            "--frames", "4", "--workers", "0"], cwd=made)
    assert code == 0, err
    return {"videos": str(videos), "frames4": str(made / "store")}


def _copy_of(key: str):
    def write(path: Path, places: dict[str, str]) -> None:
        shutil.copytree(places[key], path)
    return write


def _interrupted_run(path: Path, places: dict[str, str]) -> None:
    """What a killed `vlr precompute --videos` leaves: a work folder with durable rows."""
    from vlr_plugins.data import ResumableEmbeddingStoreWriter

    out = path.parent / path.name.removeprefix(".").removesuffix(".partial")
    writer = ResumableEmbeddingStoreWriter(out, 4, meta={"encoder": "tower.yaml"}, flush_rows=1)
    writer.add(["a"], torch.ones(1, 4))


def _checkpoint_of_another_width(path: Path, places: dict[str, str]) -> None:
    from safetensors.torch import save_file

    save_file({"tower.encoder.cls_token": torch.zeros(1, 1, 64)}, str(path))


def _released_checkpoint(config_class: str, *, payload: bool = False):
    """A UMT training checkpoint (weights, optimizer, the run's config pickled as ``config_class``);
    with ``payload``, the config's learning rate runs a command that creates ``ran`` beside it."""
    def write(path: Path, places: dict[str, str]) -> None:
        from _pickled import AttrDict, payloads, saved_as

        lr = payloads(path.parent / "ran")["posix.system"] if payload else 1e-4
        saved_as({"model": {"vision_encoder.encoder.patch_embed.proj.weight": torch.zeros(32, 3, 1, 16, 16)},
                  "optimizer": {"state": {}, "param_groups": []}, "epoch": 3,
                  "config": AttrDict({"model": {"vision_encoder": {"name": "vit_b16"}}, "optimizer": {"lr": lr}})},
                 path, {AttrDict: config_class})
    return write


def _video(name: str):
    def write(path: Path, places: dict[str, str]) -> None:
        write_video(path.with_suffix(""), "h264", 10)
    return write


def _precompute(source: str = "{videos}", encoder: str = "tower.yaml", out: str = "{tmp}/store", *more: Any,
                flag: str = "--videos") -> list[str]:
    return ["precompute", flag, source, "--encoder", encoder, "--out", out, "--workers", "0", *map(str, more)]


def _bench(entries: list[dict[str, Any]]) -> str:
    return "benchmarks:\n" + "".join(f"  - {json.dumps(e)}\n" for e in entries)


MSRVTT = {"name": "msrvtt", "reader": "msrvtt", "path": "msrvtt.csv", "item_embeddings": "store",
          "args": {"media_root": "videos"}}
BENCH_VIDEOS = {"videos/video7579.mp4": _video("a"), "videos/video7725.mp4": _video("b"),
                "videos/video9258.mp4": _video("c"), "msrvtt.csv": MSRVTT_CSV}

CASES = [
    # case, files written, command line, named in the message
    ("videos: no such folder", {}, _precompute("{tmp}/clips"), ["{tmp}/clips"]),
    ("videos: an empty folder", {"clips": None}, _precompute("{tmp}/clips"), ["{tmp}/clips", "no videos"]),
    ("videos: a folder of images only", {"clips/a.jpg": b"\xff\xd8", "clips/.b.mp4": b"hidden"},
     _precompute("{tmp}/clips"), ["{tmp}/clips", "no videos", ".mp4"]),
    ("videos: a list that is neither .txt nor .jsonl", {"list.csv": "a.mp4\n"}, _precompute("{tmp}/list.csv"),
     ["{tmp}/list.csv", ".txt or a .jsonl"]),
    ("videos: a .jsonl list with a negative start", {"list.jsonl": '{"id": "a", "path": "a.mp4", "start": -2}\n'},
     _precompute("{tmp}/list.jsonl"), ["{tmp}/list.jsonl", "line 1", "field 'start'", "-2"]),
    ("videos: a .jsonl list whose end is before its start",
     {"list.jsonl": '{"id": "a", "path": "a.mp4", "start": 5, "end": "6"}\n'},
     _precompute("{tmp}/list.jsonl"), ["{tmp}/list.jsonl", "line 1", "field 'end'", '"6"']),
    ("videos: a .jsonl list giving one id twice",
     {"list.jsonl": '{"id": "a", "path": "a.mp4"}\n{"id": "a", "path": "a.mp4", "start": 1}\n'},
     _precompute("{tmp}/list.jsonl"), ["{tmp}/list.jsonl", "line 2", "duplicate video id 'a'"]),
    ("videos: a .txt list none of whose files exist", {"list.txt": "a.mp4\nsub/b.mp4\n"},
     _precompute("{tmp}/list.txt"), ["none of the 2 videos", "{tmp}/list.txt", "{tmp}/sub/b.mp4"]),
    ("videos: a .jsonl list that is not UTF-8", {"list.jsonl": b'{"id": "a", "path": "caf\xe9.mp4"}\n'},
     _precompute("{tmp}/list.jsonl"), ["{tmp}/list.jsonl", "line 1", "not UTF-8"]),
    ("source: --images and --videos together", {}, _precompute() + ["--images", "{videos}"],
     ["--images", "not allowed with argument --videos"]),
    ("images: with --frames", {}, _precompute("{videos}", "enc:MeanColor", "{tmp}/store", "--frames", 8,
                                              flag="--images"), ["--frames", "for --videos and --benchmarks"]),
    ("images: with --resume", {}, _precompute("{videos}", "enc:MeanColor", "{tmp}/store", "--resume", flag="--images"),
     ["--resume", "for --videos"]),
    ("resume and overwrite together", {},
     _precompute("{videos}", "tower.yaml", "{tmp}/store", "--resume", "--overwrite"),
     ["--resume", "exclude each other"]),
    ("encoder: neither open_clip:, a config file nor module:callable", {}, _precompute(encoder="ViT-B-16"),
     ["--encoder", "'ViT-B-16'", "open_clip:MODEL[:PRETRAINED]", "module.sub:callable"]),
    ("encoder: open_clip: without a model", {}, _precompute(encoder="open_clip:"),
     ["--encoder", "'open_clip:'", "needs a model name"]),
    ("encoder: an open_clip model that does not exist", {}, _precompute(encoder="open_clip:ViT-Nope-99"),
     ["--encoder", "open_clip has no model 'ViT-Nope-99'"]),
    ("encoder: open_clip weights that are neither a file nor a tag", {},
     _precompute(encoder="open_clip:ViT-B-32:{tmp}/weights.pt"),
     ["--encoder", "'{tmp}/weights.pt' is neither a checkpoint file nor a pretrained tag", "openai"]),
    ("encoder: open_clip weights not downloaded (offline)", {}, _precompute(encoder="open_clip:ViT-B-32:openai"),
     ["--encoder", "cannot load 'ViT-B-32:openai'", "docs/quickstart.md (offline use)"]),
    ("encoder: a tower config that is not there", {}, _precompute(encoder="towers/vit.yaml"),
     ["--encoder", "no tower config at towers/vit.yaml"]),
    ("encoder: a tower config that is not YAML", {"bad.yaml": "type: [FramePooledVideoEncoder\n"},
     _precompute(encoder="bad.yaml"), ["--encoder", "'bad.yaml'", "not valid YAML"]),
    ("encoder: a tower config of an unknown type", {"vivit.yaml": "type: ViViT\n"}, _precompute(encoder="vivit.yaml"),
     ["--encoder", "'vivit.yaml', field 'type'", "FramePooledVideoEncoder, SpaceTimeViT", "'ViViT'"]),
    ("encoder: a tower config with an argument the tower does not take", {"odd.yaml": TOWER + "pooling: max\n"},
     _precompute(encoder="odd.yaml"), ["--encoder", "'odd.yaml'", "cannot build a FramePooledVideoEncoder", "pooling"]),
    ("encoder: a tower config whose checkpoint is not there", {"ck.yaml": TOWER + "checkpoint: ck/tower.safetensors\n"},
     _precompute(encoder="ck.yaml"),
     ["--encoder 'ck.yaml', field 'checkpoint'", "no checkpoint at ck/tower.safetensors"]),
    ("encoder: a tower config whose checkpoint pickles a config class vlr does not read",
     {"st.yaml": SPACE_TIME + "checkpoint: ckpt_best.pth\n", "ckpt_best.pth": _released_checkpoint("mmengine.Config")},
     _precompute(encoder="st.yaml"), ["--encoder 'st.yaml', field 'checkpoint'", "ckpt_best.pth", "more than tensors",
                                      "(mmengine.Config)"]),
    ("encoder: a tower config whose checkpoint's config carries a payload",
     {"st.yaml": SPACE_TIME + "checkpoint: ckpt_best.pth\n",
      "ckpt_best.pth": _released_checkpoint("utils.easydict.EasyDict", payload=True)},
     _precompute(encoder="st.yaml"), ["--encoder 'st.yaml', field 'checkpoint'", "ckpt_best.pth", "(posix.system)"]),
    ("encoder: a tower config whose checkpoint does not fit",
     {"fit.yaml": TOWER + "checkpoint: wide.safetensors\n", "wide.safetensors": _checkpoint_of_another_width},
     _precompute(encoder="fit.yaml"), ["--encoder", "field 'checkpoint'", "wide.safetensors", "(1, 1, 64)"]),
    ("encoder: a space-time tower config whose pool_norm_eps is not a number",
     {"eps.yaml": SPACE_TIME + "pool_norm: true\npool_norm_eps: small\n"}, _precompute(encoder="eps.yaml"),
     ["--encoder", "'eps.yaml'", "cannot build a SpaceTimeViT", "pool_norm_eps", "'small'"]),
    ("encoder: an image encoder, not a video tower", {"img.py": IMAGE_ENCODER}, _precompute(encoder="img:MeanColor"),
     ["--encoder", "'img:MeanColor'", "not a video tower", "encode_video"]),
    ("encoder: a tower whose frames are not square", {"wide.py": WIDE_TOWER}, _precompute(encoder="wide:Wide"),
     ["--encoder", "'wide:Wide'", "image_size", "(32, 48)"]),
    ("frames: 0", {}, _precompute("{videos}", "tower.yaml", "{tmp}/store", "--frames", 0),
     ["--frames", "positive integer"]),
    ("frames: not what the space-time tower takes", {"st.yaml": SPACE_TIME},
     _precompute("{videos}", "st.yaml", "{tmp}/store", "--frames", 8), ["--frames", "takes 4-frame clips"]),
    ("sampler: fps (a varying frame count)", {},
     _precompute("{videos}", "tower.yaml", "{tmp}/store", "--sampler", "fps"),
     ["--sampler", "invalid choice: 'fps'"]),
    ("backend: decord", {}, _precompute("{videos}", "tower.yaml", "{tmp}/store", "--backend", "decord"),
     ["--backend", "invalid choice: 'decord'"]),
    ("workers: -1", {}, _precompute("{videos}", "tower.yaml", "{tmp}/store", "--workers", -1),
     ["--workers", "integer >= 0"]),
    pytest.param("device: cuda without a GPU", {}, _precompute("{videos}", "tower.yaml", "{tmp}/store", "--device",
                                                               "cuda"), ["--device", "'cuda'"], marks=no_gpu),
    ("out: a file", {"store": "not a store"}, _precompute(), ["--out", "{tmp}/store", "is a file"]),
    ("out: a store there, neither --resume nor --overwrite", {"store": _copy_of("frames4")}, _precompute(),
     ["already exists at {tmp}/store", "--resume", "--overwrite"]),
    ("out: --resume a store of other frames", {"store": _copy_of("frames4")},
     _precompute("{videos}", "tower.yaml", "{tmp}/store", "--frames", 8, "--resume"),
     ["cannot resume", "{tmp}/store", "frames: 4 there, 8 now", "--overwrite"]),
    ("out: --resume a store of another encoder", {"store": _copy_of("frames4"), "other.yaml": TOWER},
     _precompute("{videos}", "other.yaml", "{tmp}/store", "--frames", 4, "--resume"),
     ["cannot resume", "encoder: 'tower.yaml' there, 'other.yaml' now"]),
    ("out: an interrupted run's rows, neither --resume nor --overwrite", {".store.partial": _interrupted_run},
     _precompute(), ["interrupted run left 1 embedding for {tmp}/store", "{tmp}/.store.partial", "--resume"]),
    ("out: its work folder holds files vlr did not write", {".store.partial/notes.txt": "mine"},
     _precompute("{videos}", "tower.yaml", "{tmp}/store", "--overwrite"),
     ["{tmp}/.store.partial holds notes.txt", "vlr did not write"]),
    ("out: its failures file is a folder", {"store.failures.jsonl": None}, _precompute(),
     ["--out", "{tmp}/store.failures.jsonl", "a folder"]),
    ("benchmarks: no such file", {}, _precompute("{tmp}/bench.yaml", flag="--benchmarks"),
     ["benchmarks file {tmp}/bench.yaml", "not there"]),
    ("benchmarks: an unknown reader", {"bench.yaml": _bench([{**MSRVTT, "reader": "msr-vtt"}]), **BENCH_VIDEOS},
     _precompute("{tmp}/bench.yaml", flag="--benchmarks"), ["{tmp}/bench.yaml", "benchmark 1", "field 'reader'",
                                                            "'msr-vtt'"]),
    ("benchmarks: two benchmarks give one id two files",
     {"bench.yaml": _bench([MSRVTT, {**MSRVTT, "name": "again", "args": {"media_root": "other"}}]), **BENCH_VIDEOS},
     _precompute("{tmp}/bench.yaml", flag="--benchmarks"),
     ["{tmp}/bench.yaml", "'msrvtt' and 'again'", "'video7579' two files", "other/video7579.mp4"]),
    ("benchmarks: none of the videos are there", {"bench.yaml": _bench([{**MSRVTT, "args": {"media_root": "gone"}}]),
                                                   "msrvtt.csv": MSRVTT_CSV},
     _precompute("{tmp}/bench.yaml", flag="--benchmarks"), ["none of the 3 videos", "gone/video7579.mp4"]),
    ("benchmarks: a benchmark without media files",
     {"bench.yaml": _bench([{"name": "t", "reader": "retrieval_jsonl", "path": "t.jsonl", "item_embeddings": "store"}]),
      "t.jsonl": '{"id": "a", "texts": ["a cat"]}\n'},
     _precompute("{tmp}/bench.yaml", flag="--benchmarks"), ["{tmp}/bench.yaml", "lists media files"]),
]


def _cases(table: list) -> list:
    out = []
    for row in table:
        name, *rest = getattr(row, "values", row)
        out.append(pytest.param(*rest, id=name, marks=getattr(row, "marks", ())))
    return out


def test_the_catalogue_is_large_enough():
    assert len(CASES) >= 12


@pytest.mark.parametrize("files, argv, where", _cases(CASES))
def test_precompute_videos_refuses(files, argv, where, tmp_path, world, monkeypatch):
    files = {"tower.yaml": TOWER, "enc.py": IMAGE_ENCODER, **files}
    places = {**world, "tmp": str(tmp_path)}
    write_files(tmp_path, files, places)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # an imported module leaves no __pycache__
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = tree(tmp_path)
    written = {"store", ".store.partial", "store.failures.jsonl"}
    given = {name.split("/")[0] for name in files}
    leaves = [f"{tmp_path}/{name}" for name in written - given]
    assert_refused([fill(a, places) for a in argv], *[fill(w, places) for w in where], leaves=leaves, cwd=tmp_path)
    assert tree(tmp_path) == before, "the folder changed"
    for module in ("img", "wide", "enc"):
        sys.modules.pop(module, None)
    assert not os.path.exists(f"{tmp_path}/.store.replaced")
