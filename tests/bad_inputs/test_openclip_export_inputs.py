"""The bad-input catalogue of ``vlr export open_clip:MODEL:CHECKPOINT OUT`` (an open_clip checkpoint ->
an open_clip Hub folder).

Each row is a real bad input, written by the test into an empty folder (the command's working
directory): the files, the command line, and the words its one ``error:`` line must hold. Every
case must exit 2 without a traceback (``_refusal.assert_refused``), write no ``{tmp}/export`` (nor
a temporary folder beside it), and leave the folder exactly as it was.

Placeholders: ``{tmp}`` the case's folder, ``{tiny}`` an open_clip config registered in this
process (24 text positions), ``{ckpt}`` a checkpoint of it, ``{wide}`` a checkpoint of another
architecture (embed_dim 16).
"""

from __future__ import annotations

import json

import pytest
import torch
from _refusal import assert_refused, fill, tree, write_files

open_clip = pytest.importorskip("open_clip")

from _video_world import TINY_CLIP  # noqa: E402

TINY = "vlr-export-catalogue-tiny"


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("openclip-export-catalogue")
    (root / f"{TINY}.json").write_text(json.dumps(TINY_CLIP))
    open_clip.add_model_config(root / f"{TINY}.json")
    torch.save({"state_dict": open_clip.create_model(TINY).state_dict()}, root / "epoch_1.pt")
    torch.save({"state_dict": open_clip.CLIP(**{**TINY_CLIP, "embed_dim": 16}).state_dict()}, root / "wide.pt")
    return {"tiny": TINY, "ckpt": str(root / "epoch_1.pt"), "wide": str(root / "wide.pt")}


def _export(checkpoint: str = "open_clip:{tiny}:{ckpt}", *more: str) -> list[str]:
    return ["export", checkpoint, "{tmp}/export", *more]


EXPORTED = {"export/open_clip_config.json": '{"model_cfg": {}}', "export/open_clip_model.safetensors": b"w"}

CASES = [
    ("checkpoint: no such file", {}, _export("open_clip:{tiny}:{tmp}/epoch_9.pt"),
     ["CHECKPOINT", "{tmp}/epoch_9.pt"]),
    ("checkpoint: a text file", {"epoch_1.pt": "weights\n"}, _export("open_clip:{tiny}:{tmp}/epoch_1.pt"),
     ["{tmp}/epoch_1.pt"]),
    ("checkpoint: of another architecture", {}, _export("open_clip:{tiny}:{wide}"),
     ["CHECKPOINT", "{wide}", "does not hold weights of open_clip model {tiny}"]),
    ("model: not an open_clip model", {}, _export("open_clip:ViT-Q-99:{ckpt}"),
     ["CHECKPOINT", "'ViT-Q-99'"]),
    ("model: no checkpoint after the name", {}, _export("open_clip:{tiny}"),
     ["CHECKPOINT", "open_clip:MODEL:CHECKPOINT_OR_TAG"]),
    ("model: already a Hub folder", {"clip": None}, _export("open_clip:local-dir:{tmp}/clip"),
     ["CHECKPOINT", "already an open_clip Hub model"]),
    ("--eval: not the results.json vlr eval writes", {"results.json": "{}"},
     _export("open_clip:{tiny}:{ckpt}", "--eval", "{tmp}/results.json"), ["{tmp}/results.json", "'recall'"]),
    ("--eval: no such file", {}, _export("open_clip:{tiny}:{ckpt}", "--eval", "{tmp}/results.json"),
     ["{tmp}/results.json"]),
    ("option: --tokenizer is for a vlr train checkpoint", {},
     _export("open_clip:{tiny}:{ckpt}", "--tokenizer", "{tmp}/tok"), ["--tokenizer", "open_clip"]),
    ("out: an export already there, no --overwrite", EXPORTED, _export(), ["{tmp}/export", "--overwrite"]),
    ("out: a folder that is not an export, --overwrite", {"export/thesis.tex": "years of work"},
     _export("open_clip:{tiny}:{ckpt}", "--overwrite"), ["{tmp}/export", "refusing"]),
    ("out: a file", {"export": "a file"}, _export(), ["OUT", "{tmp}/export", "is a file"]),
]


@pytest.mark.parametrize("files, argv, where", [pytest.param(*row[1:], id=row[0]) for row in CASES])
def test_open_clip_export_refuses(files, argv, where, tmp_path, world):
    places = {**world, "tmp": str(tmp_path)}
    write_files(tmp_path, files, places)
    before = tree(tmp_path)
    leaves = [] if any(f.startswith("export") for f in files) else [tmp_path / "export"]
    assert_refused([fill(a, places) for a in argv], *[fill(w, places) for w in where], leaves=leaves, cwd=tmp_path)
    assert tree(tmp_path) == before, "the folder changed"
