"""The bad-input catalogue of ``open_clip:local-dir:FOLDER:CHECKPOINT`` (an open_clip ``local-dir:``
folder's config with a trained checkpoint's weights) in `vlr eval --model`, `vlr export` and
`vlr precompute --encoder`.

Each row is a real bad input, written by the test into an empty folder (the command's working
directory): the files, the command line, and the words its one ``error:`` line must hold. Every
case must exit 2 without a traceback (``_refusal.assert_refused``), write no output, and leave
the folder exactly as it was.

Placeholders: ``{tmp}`` the case's folder, ``{clip}`` a tiny ``local-dir:`` folder
(``python -m vlr_plugins.integrations.open_clip.tiny``), ``{ckpt}`` an open_clip_train checkpoint of
it, ``{wide}`` one of another architecture (embed_dim 8), ``{pickled}`` one that also pickles a
Python object (unpickling it would call ``posix.getcwd``), ``{noconf}`` a folder of weights without
``open_clip_config.json``, ``{videos}`` a folder holding one (never decoded) video file, ``{bench}``
an MSR-VTT benchmark file and its 16-d item store.
"""

from __future__ import annotations

import os

import pytest
import torch
from _refusal import assert_refused, fill, tree, write_files

open_clip = pytest.importorskip("open_clip")

REFUSED = "not a weights-only checkpoint"


class _Call:
    """Unpickling it calls ``os.getcwd()``: what torch's weights-only loading refuses to do."""

    def __reduce__(self):
        return os.getcwd, ()


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, str]:
    import shutil

    from vlr_plugins.data import EmbeddingStoreWriter
    from vlr_plugins.integrations.open_clip.tiny import TINY_CLIP, write_local_dir_model

    root = tmp_path_factory.mktemp("openclip-local-dir-checkpoint-catalogue")
    clip = write_local_dir_model(root / "tiny-clip")
    state = open_clip.create_model(f"local-dir:{clip}").state_dict()
    torch.save({"epoch": 1, "state_dict": {f"module.{k}": v for k, v in state.items()}}, root / "epoch_1.pt")
    wide = open_clip.CLIP(**{**TINY_CLIP, "embed_dim": 8}).state_dict()
    torch.save({"epoch": 1, "state_dict": wide}, root / "wide.pt")
    torch.save({"epoch": 1, "state_dict": state, "args": _Call()}, root / "pickled.pt")
    shutil.copytree(clip, root / "noconf")
    (root / "noconf" / "open_clip_config.json").unlink()
    (root / "videos").mkdir()
    (root / "videos" / "v.mp4").write_bytes(b"never decoded: the encoder is refused first")
    csv = root / "MSRVTT_JSFUSION_test.csv"
    csv.write_text("key,vid_key,video_id,sentence\nret0,msr7579,video7579,\"a dog\"\nret1,msr7725,video7725,\"a cat\"\n")
    with EmbeddingStoreWriter(root / "store", TINY_CLIP["embed_dim"], meta={"encoder": "tiny", "frames": 4,
                                                                          "sampler": "uniform"}) as w:
        w.add(["video7579", "video7725"], torch.nn.functional.normalize(torch.randn(2, TINY_CLIP["embed_dim"]), dim=-1))
    (root / "bench.yaml").write_text(
        f"benchmarks:\n  - {{name: msrvtt, reader: msrvtt, path: {csv}, item_embeddings: {root / 'store'}}}\n")
    return {"clip": str(clip), "ckpt": str(root / "epoch_1.pt"), "wide": str(root / "wide.pt"),
            "pickled": str(root / "pickled.pt"), "noconf": str(root / "noconf"), "videos": str(root / "videos"),
            "bench": str(root / "bench.yaml")}


def _eval(model: str) -> list[str]:
    return ["eval", "--model", model, "--benchmarks", "{bench}", "--out", "{tmp}/out", "--protocol", "none"]


def _export(model: str) -> list[str]:
    return ["export", model, "{tmp}/out"]


def _precompute(model: str) -> list[str]:
    return ["precompute", "--videos", "{videos}", "--encoder", model, "--out", "{tmp}/out", "--workers", "0"]


CASES = [
    # case, files written, command line, named in the message
    ("eval: no such checkpoint", {}, _eval("open_clip:local-dir:{clip}:{tmp}/epoch_9.pt"),
     ["--model", "no checkpoint at {tmp}/epoch_9.pt"]),
    ("eval: a checkpoint of another architecture", {}, _eval("open_clip:local-dir:{clip}:{wide}"),
     ["--model", "{wide}", "does not hold weights of open_clip model local-dir:{clip}"]),
    ("eval: a checkpoint that pickles Python objects", {}, _eval("open_clip:local-dir:{clip}:{pickled}"),
     ["{pickled}", REFUSED, "posix.getcwd"]),
    ("eval: a folder without open_clip_config.json", {}, _eval("open_clip:local-dir:{noconf}:{ckpt}"),
     ["--model", "no open_clip model at {noconf}", "no open_clip_config.json"]),
    ("eval: a checkpoint that is a folder", {"run": None}, _eval("open_clip:local-dir:{clip}:{tmp}/run"),
     ["--model", "{tmp}/run is a folder"]),
    ("export: no such checkpoint", {}, _export("open_clip:local-dir:{clip}:{tmp}/epoch_9.pt"),
     ["CHECKPOINT", "no checkpoint at {tmp}/epoch_9.pt"]),
    ("export: a checkpoint of another architecture", {}, _export("open_clip:local-dir:{clip}:{wide}"),
     ["CHECKPOINT", "{wide}", "does not hold weights of open_clip model local-dir:{clip}"]),
    ("export: a checkpoint that pickles Python objects", {}, _export("open_clip:local-dir:{clip}:{pickled}"),
     ["{pickled}", REFUSED]),
    ("export: a folder without open_clip_config.json", {}, _export("open_clip:local-dir:{noconf}:{ckpt}"),
     ["CHECKPOINT", "no open_clip model at {noconf}"]),
    ("precompute: no such checkpoint", {}, _precompute("open_clip:local-dir:{clip}:{tmp}/epoch_9.pt"),
     ["--encoder", "no checkpoint at {tmp}/epoch_9.pt"]),
    ("precompute: a checkpoint of another architecture", {}, _precompute("open_clip:local-dir:{clip}:{wide}"),
     ["--encoder", "cannot build it", "size mismatch"]),
    ("precompute: a checkpoint that pickles Python objects", {}, _precompute("open_clip:local-dir:{clip}:{pickled}"),
     ["{pickled}", REFUSED]),
    ("precompute: a folder without open_clip_config.json", {}, _precompute("open_clip:local-dir:{noconf}:{ckpt}"),
     ["--encoder", "no open_clip model at {noconf}"]),
]


@pytest.mark.parametrize("files, argv, where", [pytest.param(*row[1:], id=row[0]) for row in CASES])
def test_a_local_dir_checkpoint_is_refused_in_one_line(files, argv, where, tmp_path, world):
    places = {**world, "tmp": str(tmp_path)}
    write_files(tmp_path, files, places)
    before = tree(tmp_path)
    assert_refused([fill(a, places) for a in argv], *[fill(w, places) for w in where], leaves=[tmp_path / "out"],
                   cwd=tmp_path)
    assert tree(tmp_path) == before, "the folder changed"
