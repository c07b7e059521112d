"""The bad-input catalogue of sharded ``vlr precompute`` (``--shard-index`` / ``--shard-count``,
torchrun ranks, ``--merge-only``); the unsharded cases are in test_data_inputs.py.

Each case writes its files (parts of earlier shards among them, written by ``vlr precompute``
itself) into an empty folder, runs the command there, and checks the one ``error:`` line
names what it must (the shard, the setting, the part), exit 2, no store at ``{tmp}/store``
and the folder exactly as it was: a refused shard or merge writes nothing, and the parts of
the other shards are kept.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from _refusal import assert_refused, fill, run_vlr, tree, write_files

ENCODER = """
import torch

class MeanColor:
    dim = 3

    def __call__(self, images):
        return torch.stack([torch.tensor(im.getpixel((0, 0)), dtype=torch.float32) / 255 for im in images])
"""


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> str:
    from PIL import Image

    folder = tmp_path_factory.mktemp("images")
    for i in range(3):
        Image.new("RGB", (8, 8), (60 * i, 20, 200)).save(folder / f"im{i}.png")
    return str(folder)


def _shard(index: int | None, count: int | None = 2, *more: str, out: str = "{tmp}/store") -> list[str]:
    shard = [] if index is None else ["--shard-index", str(index)]
    return ["precompute", "--images", "{images}", "--encoder", "enc:MeanColor", "--out", out, "--batch-size", "1",
            *shard, *(["--shard-count", str(count)] if count is not None else []), *more]


def _ran(*steps: Any):
    """Files made by running ``vlr precompute`` (argv lists) or moving a path (``(src, dst)``)."""
    def make(path: Path, places: dict[str, str]) -> None:
        for step in steps:
            if isinstance(step, tuple):
                shutil.move(fill(step[0], places), fill(step[1], places))
                continue
            code, _, err = run_vlr([fill(a, places) for a in step], cwd=places["tmp"])
            assert code == 0, err
    return make


def _unfinished(path: Path, places: dict[str, str]) -> None:
    """Shard 1's part as a kill leaves it: two rows durable in its work folder."""
    from vlr_plugins.data import ResumableEmbeddingStoreWriter

    writer = ResumableEmbeddingStoreWriter(Path(places["tmp"]) / ".store.shards" / "part-00001-of-00002", 3)
    writer.add(["im1", "im2"], torch.zeros(2, 3))
    writer.interrupt()


_PART0, _PART1 = "{tmp}/.store.shards/part-00000-of-00002", "{tmp}/.store.shards/part-00001-of-00002"
_MERGE = ["precompute", "--merge-only", "--out", "{tmp}/store"]

CASES = [
    # case, files written, command line, named in the message
    ("shard: index outside the count", {}, _shard(2), ["--shard-index", "0 .. 1", "found 2"]),
    ("shard: an index without a count", {}, _shard(0, None), ["--shard-count", "--shard-index"]),
    ("shard: other settings than a part already written", {"setup": _ran(_shard(0))},
     _shard(1, 2, "--dtype", "float16"), ["--dtype", "shard 1", "shard 0", _PART0, "'float32'", "'float16'"]),
    ("shard: another shard count than the parts already written", {"setup": _ran(_shard(0))}, _shard(1, 3),
     ["--shard-count", "3", "part-00000-of-00002"]),
    ("shard: another batch size (other shard ranges) than a part already written", {"setup": _ran(_shard(1))},
     _shard(0, 2, "--batch-size", "2"), ["--batch-size", "shard 0", "shard 1", _PART1]),
    ("merge: parts of different settings",
     {"setup": _ran(_shard(1), _shard(0, 2, "--dtype", "float16", out="{tmp}/other"),
                    ("{tmp}/.other.shards/part-00000-of-00002", _PART0))},
     _MERGE, ["--dtype", "shard 1", _PART1, "shard 0", "nothing merged"]),
    ("merge: a missing part", {"setup": _ran(_shard(0))}, _MERGE, ["shard 1 of 2", _PART1, "nothing merged"]),
    ("merge: an unfinished part", {"setup": _ran(_shard(0)), "unfinished": _unfinished}, _MERGE,
     ["shard 1 of 2", "{tmp}/.store.shards/.part-00001-of-00002.partial", "--resume", "nothing merged"]),
    ("merge: nothing to merge", {}, _MERGE, ["--merge-only", "{tmp}/.store.shards"]),
    ("merge: another shard count than the parts'", {"setup": _ran(_shard(0))}, [*_MERGE, "--shard-count", "3"],
     ["--shard-count", "3", "2 shards"]),
    ("merge: with a shard index", {}, [*_MERGE, "--shard-index", "0"], ["--shard-index", "--merge-only"]),
    ("merge: with an encoder", {}, [*_MERGE, "--encoder", "enc:MeanColor"], ["--encoder", "--merge-only"]),
    ("ray: with a shard index", {}, _shard(0, 2, "--engine", "ray"), ["--shard-index", "--engine ray"]),
    ("ray: with --merge-only", {}, [*_MERGE, "--engine", "ray"], ["--merge-only", "drop --engine ray"]),
    ("ray: workers without --engine ray", {}, _shard(None, None, "--ray-workers", "2"),
     ["--ray-workers", "--engine ray"]),
    ("ray: an address without --engine ray", {}, _shard(None, None, "--ray-address", "auto"),
     ["--ray-address", "--engine ray"]),
    ("ray: no workers", {}, _shard(None, None, "--engine", "ray", "--ray-workers", "0"), ["--ray-workers"]),
    ("ray: a device index", {}, _shard(None, None, "--engine", "ray", "--device", "cuda:1"),
     ["--device", "cuda:1", "Ray gives each task its GPU"]),
    ("ray: no encoder", {}, ["precompute", "--images", "{images}", "--out", "{tmp}/store", "--engine", "ray"],
     ["--encoder"]),
]


def _refuse(tmp_path: Path, images: str, monkeypatch, files: dict[str, Any], argv: list[str],
            where: list[str]) -> str:
    places = {"tmp": str(tmp_path), "images": images}
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # the encoder module leaves no __pycache__
    write_files(tmp_path, {"enc.py": ENCODER, **files}, places)
    before = tree(tmp_path)
    err = assert_refused([fill(a, places) for a in argv], *[fill(w, places) for w in where],
                         leaves=[tmp_path / "store"], cwd=tmp_path)
    assert tree(tmp_path) == before, "the folder changed"
    return err


@pytest.mark.parametrize("files, argv, where", [pytest.param(*rest, id=name) for name, *rest in CASES])
def test_sharded_precompute_refuses(files, argv, where, tmp_path, images, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    _refuse(tmp_path, images, monkeypatch, files, argv, where)


@pytest.mark.parametrize("env, argv, where", [
    pytest.param({"RANK": "1", "WORLD_SIZE": "2"}, _shard(0), ["--shard-index", "rank 1 of 2", "torchrun"],
                 id="torchrun rank and shard options disagree"),
    pytest.param({"RANK": "2", "WORLD_SIZE": "2"}, _shard(None, None), ["RANK", "0 .. 1", "found 2"],
                 id="torchrun rank outside the world"),
    pytest.param({"RANK": "one", "WORLD_SIZE": "2"}, _shard(None, None), ["RANK", "'one'"],
                 id="torchrun rank not a number"),
    pytest.param({"RANK": "0", "WORLD_SIZE": "2"}, _shard(None, None, "--engine", "ray"),
                 ["--engine", "torchrun", "once"], id="torchrun and --engine ray"),
])
def test_torchrun_ranks_that_disagree_are_refused(env, argv, where, tmp_path, images, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    _refuse(tmp_path, images, monkeypatch, {}, argv, where)
