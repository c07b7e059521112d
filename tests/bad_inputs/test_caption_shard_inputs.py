"""The bad-input catalogue of sharded ``vlr caption`` (``--shard-index`` / ``--shard-count``,
torchrun ranks, ``--merge-only``); the unsharded cases are in test_caption_inputs.py.

Each case writes its files (shards' parts among them, written with the captions file the
shards themselves write) into an empty folder, runs the command there, and checks the one
``error:`` line names what it must (the shard, the setting, the part), exit 2, no captions
file at ``{tmp}/caps.jsonl`` and the folder exactly as it was: a refused shard or merge
writes nothing, and the parts of the other shards are kept. The model named is not there:
every case is refused before a model would be loaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _refusal import assert_refused, fill, tree, write_files

from vlr_plugins.mllm.caption_shards import CaptionShardJob
from vlr_plugins.mllm.captions_file import CaptionsFile

VIDEOS = [(f"v{i}", f"videos/v{i}.mkv") for i in range(6)]  # two sorting windows of 4 batches of 1: 4 + 2
RECORD = {"model": "tiny", "model_dtype": "float32", "backend": "transformers", "name": "tiny",
          "prompt": "Describe the video in detail.", "video_input": {"num_frames": 4}, "generation": {}}


def _part(index: int, rows: int | None = None, **changed: Any):
    """Shard ``index`` of 2's part as that shard writes it (``rows``: as a kill leaves it)."""
    def make(path: Path, places: dict[str, str]) -> None:
        job = CaptionShardJob(Path(places["tmp"]) / "caps.jsonl", VIDEOS, index, 2, 1)
        job.parts.dir.mkdir(parents=True, exist_ok=True)
        with CaptionsFile(job.part, job.record({**RECORD, **changed})) as part:
            for vid, _ in job.mine()[:rows]:
                part.append(vid, f"a caption of {vid}")
    return make


def _caption(*more: str) -> list[str]:
    return ["caption", "--model", "{tmp}/no-model", "--videos", "{tmp}/videos", "--out", "{tmp}/caps.jsonl",
            "--no-progress", *more]


_PART0 = "{tmp}/.caps.jsonl.shards/part-00000-of-00002.jsonl"
_PART1 = "{tmp}/.caps.jsonl.shards/part-00001-of-00002.jsonl"
_MERGE = ["caption", "--merge-only", "--out", "{tmp}/caps.jsonl"]

CASES = [
    # case, files written, command line, named in the message
    ("shard: index outside the count", {}, _caption("--shard-index", "2", "--shard-count", "2"),
     ["--shard-index", "0 .. 1", "found 2"]),
    ("shard: an index without a count", {}, _caption("--shard-index", "0"), ["--shard-count", "--shard-index"]),
    ("shard: a count without an index", {}, _caption("--shard-count", "2"), ["--shard-index", "--shard-count 2"]),
    ("shard: the count is not positive", {}, _caption("--shard-index", "0", "--shard-count", "0"), ["--shard-count"]),
    ("shard: --out is a finished captions file", {"caps.jsonl": '{"id": "v0", "caption": "c"}\n'},
     _caption("--shard-index", "0", "--shard-count", "2", "--resume"), ["--out", "finished captions file",
                                                                         "--overwrite"]),
    ("shard: its part is there, without --resume", {"p0": _part(0, rows=1)},
     _caption("--shard-index", "0", "--shard-count", "2"), ["--resume", "shard 0 of 2", _PART0, "--overwrite"]),
    ("single process: parts of a sharded run are there", {"p0": _part(0)}, _caption(),
     ["--out", "{tmp}/.caps.jsonl.shards", "--merge-only"]),
    ("merge: parts of different settings", {"p0": _part(0), "p1": _part(1, model_dtype="bfloat16")}, _MERGE,
     ["--model-dtype", "shard 1", _PART1, "shard 0", "'float32'", "'bfloat16'", "nothing merged"]),
    ("merge: parts of different prompts", {"p0": _part(0), "p1": _part(1, prompt="Say what happens.")}, _MERGE,
     ["--prompt", "shard 1", "shard 0", "nothing merged"]),
    ("merge: a missing part", {"p0": _part(0)}, _MERGE,
     ["shard 1 of 2", _PART1, "does not exist", "--shard-index 1 --shard-count 2", "nothing merged"]),
    ("merge: a part a kill left unfinished", {"p0": _part(0), "p1": _part(1, rows=1)}, _MERGE,
     ["shard 1 of 2", _PART1, "1 of its 2 captions", "--resume", "nothing merged"]),
    ("merge: nothing to merge", {}, _MERGE, ["--merge-only", "{tmp}/.caps.jsonl.shards"]),
    ("merge: another shard count than the parts'", {"p0": _part(0)}, [*_MERGE, "--shard-count", "3"],
     ["--shard-count", "3", "2 shards"]),
    ("merge: with a shard index", {}, [*_MERGE, "--shard-index", "0"], ["--shard-index", "--merge-only"]),
    ("merge: with a model", {}, [*_MERGE, "--model", "x"], ["--model", "--merge-only"]),
    ("no --model", {}, ["caption", "--videos", "{tmp}/videos", "--out", "{tmp}/caps.jsonl"], ["--model"]),
    ("ray: with a shard index", {}, _caption("--engine", "ray", "--shard-index", "0", "--shard-count", "2"),
     ["--shard-index", "--engine ray"]),
    ("ray: with --merge-only", {}, [*_MERGE, "--engine", "ray"], ["--merge-only", "drop --engine ray"]),
    ("ray: workers without --engine ray", {}, _caption("--ray-workers", "2"), ["--ray-workers", "--engine ray"]),
    ("ray: an address without --engine ray", {}, _caption("--ray-address", "auto"), ["--ray-address", "--engine ray"]),
    ("ray: no workers", {}, _caption("--engine", "ray", "--ray-workers", "0"), ["--ray-workers"]),
    ("ray: a device index", {}, _caption("--engine", "ray", "--device", "cuda:1"),
     ["--device", "cuda:1", "Ray gives each task its GPU"]),
    ("ray: no --model", {}, ["caption", "--videos", "{tmp}/videos", "--out", "{tmp}/caps.jsonl", "--engine", "ray"],
     ["--model"]),
]


def _refuse(tmp_path: Path, monkeypatch, files: dict[str, Any], argv: list[str], where: list[str],
            env: dict[str, str] | None = None) -> str:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    places = {"tmp": str(tmp_path)}
    write_files(tmp_path, {"videos": None, **{f"videos/{Path(p).name}": b"\0" for _, p in VIDEOS}}, places)
    write_files(tmp_path, {k: v for k, v in files.items() if not callable(v)}, places)
    for make in (v for v in files.values() if callable(v)):
        make(tmp_path, places)
    before = tree(tmp_path)
    leaves = [] if "caps.jsonl" in files else [tmp_path / "caps.jsonl", tmp_path / "caps.jsonl.settings.json"]
    err = assert_refused([fill(a, places) for a in argv], *[fill(w, places) for w in where], leaves=leaves,
                         cwd=tmp_path)
    assert tree(tmp_path) == before, "the folder changed"
    return err


@pytest.mark.parametrize("files, argv, where", [pytest.param(*rest, id=name) for name, *rest in CASES])
def test_sharded_caption_refuses(files, argv, where, tmp_path, monkeypatch):
    _refuse(tmp_path, monkeypatch, files, argv, where)


@pytest.mark.parametrize("env, argv, where", [
    pytest.param({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"},
                 _caption("--shard-index", "0", "--shard-count", "2"), ["--shard-index", "rank 1 of 2", "torchrun"],
                 id="torchrun rank and shard options disagree"),
    pytest.param({"RANK": "2", "WORLD_SIZE": "2"}, _caption(), ["RANK", "0 .. 1", "found 2"],
                 id="torchrun rank outside the world"),
    pytest.param({"RANK": "one", "WORLD_SIZE": "2"}, _caption(), ["RANK", "'one'"], id="torchrun rank not a number"),
    pytest.param({"RANK": "0", "WORLD_SIZE": "2"}, _caption("--engine", "ray"), ["--engine", "torchrun", "once"],
                 id="torchrun and --engine ray"),
])
def test_torchrun_ranks_that_disagree_are_refused(env, argv, where, tmp_path, monkeypatch):
    _refuse(tmp_path, monkeypatch, {}, argv, where, env)


def test_a_refused_merge_keeps_every_part_as_it_was(tmp_path, monkeypatch):
    """The parts of a refused merge stay, byte for byte (the claim it did not take is not left)."""
    err = _refuse(tmp_path, monkeypatch, {"p0": _part(0), "p1": _part(1, model_dtype="bfloat16")}, _MERGE,
                  ["nothing merged"])
    assert err.count("error:") == 1
    parts = sorted(p.name for p in (tmp_path / ".caps.jsonl.shards").iterdir())
    assert parts == ["part-00000-of-00002.jsonl", "part-00000-of-00002.jsonl.settings.json",
                     "part-00001-of-00002.jsonl", "part-00001-of-00002.jsonl.settings.json"]
    record = json.loads((tmp_path / ".caps.jsonl.shards" / "part-00001-of-00002.jsonl.settings.json").read_text())
    assert record["shard"]["index"] == 1 and record["model_dtype"] == "bfloat16"
