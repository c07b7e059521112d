"""The bad-input catalogue of ``vlr precompute``, ``vlr eval``, ``vlr export`` and ``vlr push``.

Each row is a real bad input, written by the test into an empty folder (the command's
working directory): the files, the command line, and the words its one ``error:`` line
must hold to say where the problem is (file, line, record, field or option). Every case
must exit 2 without a traceback (``_refusal.assert_refused``), leave no output behind,
and leave the folder exactly as it was: nothing created (half-written or temporary),
nothing replaced.

Placeholders in the tables: ``{tmp}`` the case's folder, ``{ckpt}`` a `vlr train`
checkpoint of a tiny model (32-d, 160 positions), ``{store}`` the store of its images
(32-d), ``{short}`` a ``retrieval_jsonl`` benchmark those images belong to, ``{images}`` a
folder of three images.
"""

from __future__ import annotations

import fractions
import json
import os
import pickle
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from _refusal import assert_refused, fill, tree, write_files

pytest.importorskip("mmengine")

AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
read_only = pytest.mark.skipif(AS_ROOT, reason="root writes into read-only folders")
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")

GOOD_ENCODER = """
import torch

class MeanColor:
    dim = 3

    def __call__(self, images):
        return torch.stack([torch.tensor(im.getpixel((0, 0)), dtype=torch.float32) / 255 for im in images])
"""


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def world(tiny_world, tiny_checkpoint, tmp_path_factory) -> dict[str, str]:
    from PIL import Image

    images = tmp_path_factory.mktemp("images")
    for i in range(3):
        Image.new("RGB", (8, 8), (60 * i, 20, 200)).save(images / f"im{i}.png")
    return {"ckpt": str(tiny_checkpoint), "store": tiny_world["image_embeddings"], "short": tiny_world["eval_short"],
            "images": str(images)}


def refuse(tmp_path: Path, world: dict[str, str], monkeypatch, files: dict[str, Any], argv: list[str],
           where: list[str], leaves: list[str]) -> str:
    """Write ``files``, run ``vlr ARGV`` in ``tmp_path``, and check the refusal; returns stderr."""
    places = {**world, "tmp": str(tmp_path)}
    write_files(tmp_path, files, places)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # an imported encoder module leaves no __pycache__
    before = tree(tmp_path)
    err = assert_refused([fill(a, places) for a in argv], *[fill(w, places) for w in where],
                         leaves=[fill(p, places) for p in leaves], cwd=tmp_path)
    assert tree(tmp_path) == before, "the folder changed"
    return err


def _cases(table: list) -> list:
    """The rows of a table, ``(case, files, argv, where)`` or ``pytest.param`` of them, as
    parameters named by their case."""
    out = []
    for row in table:
        name, *rest = getattr(row, "values", row)
        out.append(pytest.param(*rest, id=name, marks=getattr(row, "marks", ())))
    return out


def _read_only_folder(path: Path, places: dict[str, str]) -> None:
    path.mkdir()
    path.chmod(0o555)


# --------------------------------------------------------------------------- precompute

def _precompute(images: str = "{images}", encoder: str = "enc_ok:MeanColor", out: str = "{tmp}/store",
                *more: str) -> list[str]:
    return ["precompute", "--images", images, "--encoder", encoder, "--out", out, *more]


PRECOMPUTE = [
    # case, files written, command line, named in the message
    ("images: no such folder", {}, _precompute("{tmp}/photos"), ["{tmp}/photos"]),
    ("images: an empty folder", {"photos": None}, _precompute("{tmp}/photos"), ["{tmp}/photos", "no images"]),
    ("images: a folder without image files", {"photos/notes.txt": "a cat", "photos/.hidden.png": b"\x89PNG"},
     _precompute("{tmp}/photos"), ["{tmp}/photos", "no images"]),
    ("images: a list that is neither .txt nor .jsonl", {"list.csv": "a.png\n"}, _precompute("{tmp}/list.csv"),
     ["{tmp}/list.csv", ".txt or a .jsonl"]),
    ("images: an empty list", {"list.txt": "\n\n"}, _precompute("{tmp}/list.txt"), ["{tmp}/list.txt", "no images"]),
    ("images: a .txt list of files that are not there", {"list.txt": "a.png\nsub/b.png\n"},
     _precompute("{tmp}/list.txt"), ["{tmp}/list.txt", "2 of the 2", "{tmp}/sub/b.png"]),
    ("images: a .txt list giving one id twice", {"list.txt": "a.png\na.jpg\n"}, _precompute("{tmp}/list.txt"),
     ["{tmp}/list.txt", "line 2", "duplicate image id 'a'"]),
    ("images: a .jsonl list with a line that is not JSON", {"list.jsonl": '{"id": "a", "path": "a.png"}\n{"id": \n'},
     _precompute("{tmp}/list.jsonl"), ["{tmp}/list.jsonl", "line 2", "invalid JSON"]),
    ("images: a .jsonl list without 'path'", {"list.jsonl": '{"id": "a", "file": "a.png"}\n'},
     _precompute("{tmp}/list.jsonl"), ["{tmp}/list.jsonl", "line 1", "'path'"]),
    ("images: a .jsonl list that is not UTF-8", {"list.jsonl": b'{"id": "a", "path": "caf\xe9.png"}\n'},
     _precompute("{tmp}/list.jsonl"), ["{tmp}/list.jsonl", "line 1", "not UTF-8", "0xe9"]),
    ("images: a file that is not an image", {"photos/a.png": b"not a png at all", "enc_ok.py": GOOD_ENCODER},
     _precompute("{tmp}/photos"), ["{tmp}/photos/a.png", "cannot read the image"]),
    ("encoder: no module:callable", {}, _precompute(encoder="MeanColor"), ["--encoder", "'MeanColor'", "module.sub:attr"]),
    ("encoder: blip: without a model", {}, _precompute(encoder="blip:"), ["--encoder", "'blip:'"]),
    ("encoder: a BLIP model that is not downloaded (offline)", {}, _precompute(encoder="blip:nobody/no-such-blip"),
     ["--encoder", "'nobody/no-such-blip'", "docs/quickstart.md (offline use)"]),
    ("encoder: a module that is not there", {}, _precompute(encoder="enc_absent:MeanColor"),
     ["--encoder", "cannot import 'enc_absent'", "{tmp}"]),
    ("encoder: a module without the attribute", {"enc_attr.py": GOOD_ENCODER}, _precompute(encoder="enc_attr:Mean"),
     ["--encoder", "'enc_attr:Mean'", "has no 'Mean'"]),
    ("encoder: an attribute that is not callable", {"enc_value.py": "WIDTH = 3\n"},
     _precompute(encoder="enc_value:WIDTH"), ["--encoder", "'enc_value:WIDTH'", "not callable"]),
    ("encoder: one row for all images", {"enc_shape.py": "import torch\ndef one(images):\n    return torch.zeros(3)\n"},
     _precompute(encoder="enc_shape:one"), ["enc_shape:one", "returned shape (3,) for 3 images"]),
    ("encoder: NaN embeddings", {"enc_nan.py": "import torch\ndef nan(images):\n    return torch.full((len(images), 3), "
                                              "float('nan'))\n"},
     _precompute(encoder="enc_nan:nan"), ["enc_nan:nan", "'im0'", "not finite"]),
    ("device: not a device", {}, _precompute("{images}", "enc_ok:MeanColor", "{tmp}/store", "--device", "gpu0"),
     ["--device", "'gpu0'"]),
    pytest.param("device: cuda without a GPU", {}, _precompute("{images}", "enc_ok:MeanColor", "{tmp}/store",
                                                                "--device", "cuda"), ["--device", "'cuda'"],
                 marks=no_gpu),
    ("batch size: 0", {}, _precompute("{images}", "enc_ok:MeanColor", "{tmp}/store", "--batch-size", "0"),
     ["--batch-size", "positive integer"]),
    ("dtype: bfloat16", {}, _precompute("{images}", "enc_ok:MeanColor", "{tmp}/store", "--dtype", "bfloat16"),
     ["--dtype", "bfloat16"]),
    ("out: a file", {"store": "not a store"}, _precompute(out="{tmp}/store"), ["--out", "{tmp}/store", "is a file"]),
    ("out: under a file", {"notes": "a file"}, _precompute(out="{tmp}/notes/store"), ["--out", "{tmp}/notes"]),
    ("out: a store already there, no --overwrite", {"enc_ok.py": GOOD_ENCODER, "store/index.json":
                                                    '{"format": "vlr-embedding-store"}'},
     _precompute(out="{tmp}/store"), ["{tmp}/store", "--overwrite"]),
    ("out: a folder that is not a store, --overwrite", {"store/thesis.tex": "years of work"},
     _precompute("{images}", "enc_ok:MeanColor", "{tmp}/store", "--overwrite"), ["{tmp}/store", "refusing"]),
    pytest.param("out: in a read-only folder", {"locked": _read_only_folder},
                  _precompute(out="{tmp}/locked/store"), ["--out", "{tmp}/locked"], marks=read_only),
]


@pytest.mark.parametrize("files, argv, where", _cases(PRECOMPUTE))
def test_precompute_refuses(files, argv, where, tmp_path, world, monkeypatch):
    files = {"enc_ok.py": GOOD_ENCODER, **files}
    leaves = [] if any(f.split("/")[0] in ("store",) for f in files) else ["{tmp}/store"]
    refuse(tmp_path, world, monkeypatch, files, argv, where, leaves)


# --------------------------------------------------------------------------- eval

BENCH = "benchmarks:\n  - {name: short, reader: retrieval_jsonl, path: {short}, item_embeddings: {store}, max_tokens: 20}\n"


def _bench(**entry: Any) -> str:
    """A benchmarks file of one benchmark: the good one, with ``entry`` changed (``None``: left out)."""
    spec = {"name": "short", "reader": "retrieval_jsonl", "path": "{short}", "item_embeddings": "{store}",
            "max_tokens": 20, **entry}
    return "benchmarks:\n  - " + json.dumps({k: v for k, v in spec.items() if v is not None}) + "\n"


def _eval(*more: str, model: str = "{ckpt}", bench: str = "{tmp}/bench.yaml") -> list[str]:
    return ["eval", "--model", model, "--benchmarks", bench, "--out", "{tmp}/results", "--protocol", "none", *more]


def _checkpoint(obj: Any) -> Callable[[Path, dict[str, str]], None]:
    return lambda path, places: torch.save(obj, path)


def _config_checkpoint(config_class: str, *, payload: bool = False) -> Callable[[Path, dict[str, str]], None]:
    """A checkpoint with its run's config pickled as ``config_class`` (UMT / SMILE save one); with
    ``payload``, the config's learning rate runs a command that creates ``ran`` beside it."""
    def write(path: Path, places: dict[str, str]) -> None:
        from _pickled import AttrDict, payloads, saved_as

        lr = payloads(path.parent / "ran")["posix.system"] if payload else 1e-4
        saved_as({"meta": {}, "state_dict": {"w": torch.zeros(2)}, "config": AttrDict({"optimizer": {"lr": lr}})},
                 path, {AttrDict: config_class})
    return write


def _store(dim: int, ids: list[str] | None = None) -> Callable[[Path, dict[str, str]], None]:
    def make(path: Path, places: dict[str, str]) -> None:
        from vlr_plugins.data import EmbeddingStoreWriter

        names = ids or [json.loads(line)["id"] for line in Path(places["short"]).read_text().splitlines()]
        with EmbeddingStoreWriter(path, dim) as writer:
            writer.add(names, torch.nn.functional.normalize(torch.randn(len(names), dim), dim=-1))
    return make


def _broken_store(damage: Callable[[Path], None]) -> Callable[[Path, dict[str, str]], None]:
    def make(path: Path, places: dict[str, str]) -> None:
        shutil.copytree(places["store"], path)
        damage(path)
    return make


def _first_shard(store: Path) -> Path:
    return min(store.glob("*.safetensors"))


def _on_benchmark(reader: str, file: str, content: Any, **args: Any) -> dict[str, Any]:
    """Files of a one-benchmark file whose annotation ``file`` (``content``) is read by ``reader``."""
    return {file: content, "bench.yaml": _bench(name=reader, reader=reader, path=file, args=args or None)}


EVAL = [
    # model
    ("model: no such checkpoint", {}, _eval(model="{tmp}/epoch_9.pth"), ["--model", "{tmp}/epoch_9.pth"]),
    ("model: a folder", {"run": None}, _eval(model="{tmp}/run"), ["--model", "{tmp}/run", "is a folder"]),
    ("model: a text file", {"model.pth": "this is not a checkpoint\n"}, _eval(model="{tmp}/model.pth"),
     ["{tmp}/model.pth", "not a PyTorch checkpoint"]),
    ("model: an empty file", {"model.pth": b""}, _eval(model="{tmp}/model.pth"),
     ["{tmp}/model.pth", "not a PyTorch checkpoint"]),
    ("model: a pickle of Python objects", {"model.pth": _checkpoint({"meta": {}, "lr": fractions.Fraction(1, 3)})},
     _eval(model="{tmp}/model.pth"), ["{tmp}/model.pth", "not a weights-only checkpoint", "fractions.Fraction"]),
    ("model: a checkpoint whose pickled training config is a class vlr does not read",
     {"model.pth": _config_checkpoint("mmengine.config.ConfigDict")}, _eval(model="{tmp}/model.pth"),
     ["{tmp}/model.pth", "not a weights-only checkpoint", "mmengine.config.ConfigDict"]),
    ("model: a checkpoint whose training config carries a payload",
     {"model.pth": _config_checkpoint("easydict.EasyDict", payload=True)}, _eval(model="{tmp}/model.pth"),
     ["{tmp}/model.pth", "not a weights-only checkpoint", "posix.system"]),
    ("model: a whole pickled module (torch.save(model))", {"model.pth": _checkpoint(torch.nn.Linear(2, 2))},
     _eval(model="{tmp}/model.pth"), ["{tmp}/model.pth", "not a weights-only checkpoint", "Linear"]),
    ("model: a plain pickle", {"model.pth": lambda path, places: path.write_bytes(pickle.dumps({"w": [1.0]}))},
     _eval(model="{tmp}/model.pth"), ["{tmp}/model.pth", "not a PyTorch checkpoint"]),
    ("model: a tensor, not a checkpoint", {"model.pth": _checkpoint(torch.zeros(3))}, _eval(model="{tmp}/model.pth"),
     ["{tmp}/model.pth", "checkpoint mapping"]),
    ("model: a checkpoint of another trainer", {"model.pth": _checkpoint({"state_dict": {"w": torch.zeros(2)}})},
     _eval(model="{tmp}/model.pth"), ["{tmp}/model.pth", "meta.vlr_text_encoder"]),
    ("model: a BLIP model that is not downloaded (offline)", {}, _eval(model="blip:nobody/no-such-blip"),
     ["--model", "'nobody/no-such-blip'", "docs/quickstart.md (offline use)"]),
    ("tokenizer: not loadable", {}, _eval("--tokenizer", "{tmp}/no-tokenizer"),
     ["--tokenizer", "{tmp}/no-tokenizer", "docs/quickstart.md"]),
    # benchmarks file
    ("benchmarks: no such file", {}, _eval(bench="{tmp}/benchmarks.yml"), ["{tmp}/benchmarks.yml"]),
    ("benchmarks: not YAML", {"bench.yaml": "benchmarks: [\n  - {name: x\n"}, _eval(),
     ["{tmp}/bench.yaml", "line 2", "not valid YAML"]),
    ("benchmarks: not UTF-8", {"bench.yaml": b"benchmarks:\n  - {name: caf\xe9}\n"}, _eval(),
     ["{tmp}/bench.yaml", "line 2", "not UTF-8"]),
    ("benchmarks: a list at the top", {"bench.yaml": "- {name: short}\n"}, _eval(), ["{tmp}/bench.yaml", "'benchmarks:'"]),
    ("benchmarks: an unknown key", {"bench.yaml": _bench(max_token=20)}, _eval(),
     ["{tmp}/bench.yaml", "benchmark 1", "'max_token'", "allowed"]),
    ("benchmarks: a key at the top beside benchmarks", {"bench.yaml": BENCH + "protocol: table2\n"}, _eval(),
     ["{tmp}/bench.yaml", "'protocol'"]),
    ("benchmarks: no item_embeddings", {"bench.yaml": _bench(item_embeddings=None)}, _eval(),
     ["{tmp}/bench.yaml", "benchmark 1", "'item_embeddings'"]),
    ("benchmarks: an unknown reader", {"bench.yaml": _bench(reader="flickr")}, _eval(),
     ["{tmp}/bench.yaml", "benchmark 1", "'reader'", "unknown reader 'flickr'", "flickr30k"]),
    ("benchmarks: a reader of training samples", {"bench.yaml": _bench(reader="paragraph_samples")}, _eval(),
     ["{tmp}/bench.yaml", "'reader'", "does not read a retrieval benchmark"]),
    ("benchmarks: an argument the reader does not take", {"bench.yaml": _bench(args={"split": "test"})}, _eval(),
     ["{tmp}/bench.yaml", "benchmark 1", "'args.split'", "takes: name"]),
    ("benchmarks: args that are not a mapping", {"bench.yaml": _bench(args=["test"])}, _eval(),
     ["{tmp}/bench.yaml", "'args'"]),
    ("benchmarks: an argument value the reader refuses",
     _on_benchmark("shot2story", "shot2story.json", "[]", level="scene"), _eval(),
     ["{tmp}/bench.yaml", "benchmark 1", "'args'", "level must be one of clip, shot"]),
    ("benchmarks: an annotation file that is not there", {"bench.yaml": _bench(path="{tmp}/flickr.json")}, _eval(),
     ["{tmp}/bench.yaml", "'path'", "{tmp}/flickr.json"]),
    ("benchmarks: a store that is not there", {"bench.yaml": _bench(item_embeddings="stores/flickr")}, _eval(),
     ["{tmp}/bench.yaml", "'item_embeddings'", "{tmp}/stores/flickr"]),
    ("benchmarks: a name given twice", {"bench.yaml": BENCH + BENCH[len("benchmarks:\n"):]}, _eval(),
     ["{tmp}/bench.yaml", "benchmark 2", "'name'", "duplicate"]),
    ("benchmarks: a budget that is a string", {"bench.yaml": _bench(max_tokens="20")}, _eval(),
     ["{tmp}/bench.yaml", "'max_tokens'"]),
    ("benchmarks: a budget past the model's positions", {"bench.yaml": _bench(max_tokens=512)}, _eval(),
     ["{tmp}/bench.yaml", "'max_tokens'", "160 positions"]),
    ("benchmarks: a text kind the file does not have", {"bench.yaml": _bench(text_kinds=["spatial"])}, _eval(),
     ["{tmp}/bench.yaml", "'text_kinds'", "'spatial'"]),
    ("benchmarks: no budget at all", {"bench.yaml": _bench(max_tokens=None)}, _eval(),
     ["'short'", "no token budget", "--budget short=N"]),
    # the benchmarks' own files, in their official formats
    ("retrieval_jsonl: texts that are not a list",
     _on_benchmark("retrieval_jsonl", "split.jsonl", '{"id": "a", "texts": ["a cat"]}\n{"id": "b", "texts": "a dog"}\n'),
     _eval(), ["{tmp}/split.jsonl", "line 2", "'texts'"]),
    ("retrieval_jsonl: a byte that is not UTF-8",
     _on_benchmark("retrieval_jsonl", "split.jsonl", b'{"id": "a", "texts": ["a cat"]}\n{"id": "b", "texts": ["\xff"]}\n'),
     _eval(), ["{tmp}/split.jsonl", "line 2", "not UTF-8"]),
    ("flickr30k: a token-file line without a tab",
     _on_benchmark("flickr30k", "results_20130124.token", "1000092795.jpg#0\tTwo young guys .\n1000092795.jpg#1 Two.\n",
                   split="all"),
     _eval(), ["{tmp}/results_20130124.token", "line 2", "no tab"]),
    ("coco_captions: a caption that is a number",
     _on_benchmark("coco_captions", "captions_val2017.json", json.dumps(
         {"images": [{"id": 139, "file_name": "000000000139.jpg"}],
          "annotations": [{"image_id": 139, "id": 1, "caption": 5}]})),
     _eval(), ["{tmp}/captions_val2017.json", "annotation 0", "'caption'"]),
    ("docci: an unknown split",
     _on_benchmark("docci", "docci_descriptions.jsonlines", "".join(json.dumps(r) + "\n" for r in [
         {"example_id": "test_01", "image_file": "test_01.jpg", "description": "A cat.", "split": "test"},
         {"example_id": "test_02", "image_file": "test_02.jpg", "description": "A dog.", "split": "dev"}])),
     _eval(), ["{tmp}/docci_descriptions.jsonlines", "line 2", "'split'"]),
    ("msrvtt: a JSFusion header without 'sentence'",
     _on_benchmark("msrvtt", "MSRVTT_JSFUSION_test.csv", "key,vid_key,video_id\nret0,msr7020,video7020\n"),
     _eval(), ["{tmp}/MSRVTT_JSFUSION_test.csv", "line 1", "'sentence'"]),
    ("sharegpt4v: a record without the captioner's turn",
     _on_benchmark("sharegpt4v", "sharegpt4v.json", json.dumps(
         [{"id": "1", "image": "coco/train2017/1.jpg", "conversations": [{"from": "human", "value": "<image>"}]}])),
     _eval(), ["{tmp}/sharegpt4v.json", "record 0", "'conversations'"]),
    ("carebench: an object where a list belongs", _on_benchmark("carebench", "carebench.json", "{}"),
     _eval(), ["{tmp}/carebench.json", "JSON array"]),
    # stores
    ("store: narrower than the model", {"narrow": _store(16), "bench.yaml": _bench(item_embeddings="narrow")}, _eval(),
     ["{tmp}/bench.yaml", "'item_embeddings'", "{tmp}/narrow", "16-d", "32-d"]),
    ("store: without the benchmark's items", {"other": _store(32, ["x1", "x2"]), "bench.yaml":
                                              _bench(item_embeddings="other")}, _eval(),
     ["{tmp}/other", "no embedding", "'eval-000000'"]),
    ("store: a shard that is not safetensors", {"broken": _broken_store(lambda s: _first_shard(s).write_bytes(b"xx")),
                                                "bench.yaml": _bench(item_embeddings="broken")}, _eval(),
     ["{tmp}/broken/embeddings-00000.safetensors"]),
    ("store: a shard that is gone", {"broken": _broken_store(lambda s: _first_shard(s).unlink()),
                                     "bench.yaml": _bench(item_embeddings="broken")}, _eval(),
     ["{tmp}/broken", "missing its shard", "embeddings-00000.safetensors"]),
    ("store: an index.json that is not JSON", {"broken": _broken_store(lambda s: (s / "index.json").write_text("{")),
                                               "bench.yaml": _bench(item_embeddings="broken")}, _eval(),
     ["{tmp}/broken/index.json", "not valid JSON"]),
    # options
    ("budget: not NAME=INTEGER", {}, _eval("--budget", "short=x"), ["--budget", "'short=x'"]),
    ("budget: below 3 tokens", {"bench.yaml": _bench(max_tokens=None)}, _eval("--budget", "short=2"),
     ["--budget", "'short=2'"]),
    ("budget: a benchmark the file does not have", {}, _eval("--budget", "shrot=20"),
     ["--budget", "'shrot'", "short"]),
    ("budget: past the model's positions", {"bench.yaml": _bench(max_tokens=None)}, _eval("--budget", "short=248"),
     ["--budget", "short=248", "160 positions"]),
    ("truncation: not integers", {}, _eval("--truncation", "20,x"), ["--truncation", "'20,x'"]),
    ("truncation: a budget twice", {}, _eval("--truncation", "20,40,20"), ["--truncation", "twice"]),
    ("truncation: past the model's positions", {}, _eval("--truncation", "20,400"), ["--truncation", "400"]),
    ("protocol: unknown", {}, _eval("--protocol", "table2"), ["--protocol", "'table2'", "paragraph-supervision/table2"]),
    ("batch size: negative", {}, _eval("--batch-size", "-4"), ["--batch-size"]),
    pytest.param("device: cuda without a GPU", {}, _eval("--device", "cuda"), ["--device", "'cuda'"], marks=no_gpu),
    ("out: a file", {"results": "a file"}, _eval(), ["--out", "{tmp}/results", "is a file"]),
    pytest.param("out: in a read-only folder", {"locked": _read_only_folder},
                 ["eval", "--model", "{ckpt}", "--benchmarks", "{tmp}/bench.yaml", "--out", "{tmp}/locked/results"],
                 ["--out", "{tmp}/locked"], marks=read_only),
]


@pytest.mark.parametrize("files, argv, where", _cases(EVAL))
def test_eval_refuses(files, argv, where, tmp_path, world, monkeypatch):
    files = {"bench.yaml": BENCH, **files}
    leaves = [] if "results" in files else ["{tmp}/results"]
    refuse(tmp_path, world, monkeypatch, files, argv, where, leaves)


# --------------------------------------------------------------------------- export


def _export(checkpoint: str = "{ckpt}", out: str = "{tmp}/export", *more: str) -> list[str]:
    return ["export", checkpoint, out, *more]


EXPORT = [
    ("checkpoint: no such file", {}, _export("{tmp}/epoch_9.pth"), ["{tmp}/epoch_9.pth"]),
    ("checkpoint: a folder", {"run": None}, _export("{tmp}/run"), ["{tmp}/run", "is a folder"]),
    ("checkpoint: a text file", {"model.pth": "weights\n"}, _export("{tmp}/model.pth"),
     ["{tmp}/model.pth", "not a PyTorch checkpoint"]),
    ("checkpoint: a pickle of Python objects", {"model.pth": _checkpoint({"meta": {}, "lr": fractions.Fraction(1, 3)})},
     _export("{tmp}/model.pth"), ["{tmp}/model.pth", "not a weights-only checkpoint"]),
    ("checkpoint: without the text encoder's weights",
     {"model.pth": _checkpoint({"meta": {"vlr_text_encoder": {"type": "BlipTextEncoder"}},
                                "state_dict": {"image_proj.weight": torch.zeros(2)}})},
     _export("{tmp}/model.pth"), ["{tmp}/model.pth", "'state_dict'", "text_encoder.*"]),
    ("checkpoint: a BLIP model that is not downloaded (offline)", {}, _export("blip:nobody/no-such-blip"),
     ["'nobody/no-such-blip'", "docs/quickstart.md (offline use)"]),
    ("eval: malformed JSON", {"results.json": '{"recall": {"short": \n'}, _export("{ckpt}", "{tmp}/export", "--eval",
                                                                                 "{tmp}/results.json"),
     ["{tmp}/results.json", "line 2", "not valid JSON"]),
    ("eval: not a results file", {"results.json": "[1, 2]"}, _export("{ckpt}", "{tmp}/export", "--eval",
                                                                     "{tmp}/results.json"),
     ["{tmp}/results.json", "results.json of `vlr eval`"]),
    ("eval: recall that is not numbers", {"results.json": '{"recall": {"short": {"i2t_r1": "high"}}}'},
     _export("{ckpt}", "{tmp}/export", "--eval", "{tmp}/results.json"), ["{tmp}/results.json", "'recall.short'"]),
    ("eval: not UTF-8", {"results.json": b'{"recall": {"caf\xe9": {}}}'},
     _export("{ckpt}", "{tmp}/export", "--eval", "{tmp}/results.json"), ["{tmp}/results.json", "line 1", "not UTF-8"]),
    ("eval: no such file", {}, _export("{ckpt}", "{tmp}/export", "--eval", "{tmp}/results.json"),
     ["{tmp}/results.json"]),
    ("tokenizer: not loadable", {}, _export("{ckpt}", "{tmp}/export", "--tokenizer", "{tmp}/no-tokenizer"),
     ["--tokenizer", "{tmp}/no-tokenizer"]),
    ("out: an export already there, no --overwrite", {"export/config.json": "{}", "export/model.safetensors": b"x"},
     _export(), ["{tmp}/export", "--overwrite"]),
    ("out: a folder that is not an export, --overwrite", {"export/thesis.tex": "years of work"},
     _export("{ckpt}", "{tmp}/export", "--overwrite"), ["{tmp}/export", "refusing"]),
    ("out: a file", {"export": "a file"}, _export(), ["OUT", "{tmp}/export", "is a file"]),
    ("out: under a file", {"notes": "a file"}, _export(out="{tmp}/notes/export"), ["OUT", "{tmp}/notes"]),
    pytest.param("out: in a read-only folder", {"locked": _read_only_folder},
                 _export(out="{tmp}/locked/export"), ["OUT", "{tmp}/locked"], marks=read_only),
]


@pytest.mark.parametrize("files, argv, where", _cases(EXPORT))
def test_export_refuses(files, argv, where, tmp_path, world, monkeypatch):
    leaves = [] if any(f.startswith("export") for f in files) else ["{tmp}/export"]
    refuse(tmp_path, world, monkeypatch, files, argv, where, leaves)


# --------------------------------------------------------------------------- push

EXPORTED = {"export/config.json": '{"model_type": "vlr_blip_text_encoder"}', "export/model.safetensors": b"weights",
            "export/tokenizer_config.json": "{}"}
HALF = '{"model_type": "vlr_blip_text_encoder", "vision_config": {"hidden_size": 32}}'

PUSH = [
    ("folder: not there", {}, ["push", "{tmp}/export", "me/blip-c5"], ["{tmp}/export", "not a folder"]),
    ("folder: a file", {"export": "a file"}, ["push", "{tmp}/export", "me/blip-c5"], ["{tmp}/export", "not a folder"]),
    ("folder: a training run, not an export", {"export/epoch_1.pth": b"\x80\x02}q\x00."},
     ["push", "{tmp}/export", "me/blip-c5"], ["{tmp}/export", "epoch_1.pth", "pickle"]),
    ("folder: no config.json", {"export/model.safetensors": b"weights"}, ["push", "{tmp}/export", "me/blip-c5"],
     ["{tmp}/export", "config.json"]),
    ("folder: no weights", {"export/config.json": "{}"}, ["push", "{tmp}/export", "me/blip-c5"],
     ["{tmp}/export", "safetensors"]),
    ("folder: config.json that is not JSON", {"export/config.json": "{", "export/model.safetensors": b"w"},
     ["push", "{tmp}/export", "me/blip-c5"], ["{tmp}/export/config.json"]),
    ("folder: half an export, an image side without its processor",
     {**EXPORTED, "export/config.json": HALF}, ["push", "{tmp}/export", "me/blip-c5"],
     ["{tmp}/export", "half an export", "preprocessor_config.json"]),
    ("folder: half an export, auto_map code missing",
     {**EXPORTED, "export/config.json": '{"model_type": "vlr_blip_text_encoder", "auto_map": '
                                        '{"AutoModel": "modeling_vlr.VlrTextEncoderModel"}}'},
     ["push", "{tmp}/export", "me/blip-c5"], ["{tmp}/export", "half an export", "modeling_vlr.py"]),
    ("folder: half an export, no tokenizer", {"export/config.json": '{"model_type": "vlr_blip_text_encoder"}',
                                              "export/model.safetensors": b"w"},
     ["push", "{tmp}/export", "me/blip-c5"], ["{tmp}/export", "half an export", "tokenizer_config.json"]),
    ("folder: half an export, modules.json without its module config", {**EXPORTED, "export/modules.json":
        '[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"}]'},
     ["push", "{tmp}/export", "me/blip-c5"], ["{tmp}/export", "half an export", "sentence_bert_config.json"]),
    ("repo id: spaces and '!'", EXPORTED, ["push", "{tmp}/export", "my model!"], ["'my model!'", "namespace/name"]),
    ("repo id: no namespace", EXPORTED, ["push", "{tmp}/export", "blip-c5"], ["'blip-c5'", "namespace/name"]),
    ("repo id: two slashes", EXPORTED, ["push", "{tmp}/export", "me/models/blip-c5"],
     ["'me/models/blip-c5'", "namespace/name"]),
]


@pytest.mark.parametrize("files, argv, where", _cases(PUSH))
def test_push_refuses(files, argv, where, tmp_path, world, monkeypatch):
    refuse(tmp_path, world, monkeypatch, files, argv, where, [])
