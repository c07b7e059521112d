"""The bad-input catalogue of model folders the newer commands load: `vlr precompute` / `vlr eval`
with ``mllm:``, `vlr caption`, `vlr lens`, `vlr train care/stage1` (``model.pretrained``) and
`vlr openclip-train --model local-dir:`.

Each row is a real bad input: a folder whose weights are a pickle ``torch.load(weights_only=True)``
refuses (``pytorch_model.bin`` / ``open_clip_pytorch_model.bin`` holding a Python object besides
the tensors), a model folder without ``config.json``, a folder that holds no MLLM (a BERT config,
a ``vlr export`` of a text encoder), a path that is not there, and a captions file that cannot be
written. Every case must exit 2 with one ``error:`` line naming the file / folder / option
(``_refusal.assert_refused``), write no output, and leave the
case's folder as it was.

Placeholders: ``{tmp}`` the case's folder, ``{mllm}`` a tiny random Qwen2-VL saved with its
processor, ``{pickled}`` that folder with its weights as a pickle that names ``posix.getcwd``
(unpickling it would call it), ``{garbled}`` that folder with bytes no torch.save
wrote as its weights, ``{noconf}`` that folder without ``config.json``, ``{export}``
a ``vlr export`` of a tiny BLIP text encoder, ``{clip}`` an open_clip ``local-dir:`` folder
whose weights are such a pickle, ``{videos}`` a folder of one video, ``{caps}`` a stage-I
captions file of that video, ``{nli}`` a stage-II NLI triplets file, ``{jsonl}`` an image-text training file, ``{csv}`` / ``{store}``
an MSR-VTT file and its item store.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from _refusal import assert_refused, fill, tree, write_files

pytest.importorskip("transformers")
pytest.importorskip("torchvision")
pytest.importorskip("av")

from _tiny_mllm import save_tiny_qwen2vl, write_clip  # noqa: E402

AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
BERT = json.dumps({"model_type": "bert", "architectures": ["BertModel"], "hidden_size": 32})
MSRVTT = {"video7579": "a girl puts a sweater on a dog", "video7725": "people clap in a room"}
REFUSED = "is not a weights-only checkpoint"


class _Call:
    """Unpickling it calls ``os.getcwd()``: what torch's weights-only loading refuses to do."""

    def __reduce__(self):
        return os.getcwd, ()


def _pickle_weights(folder: Path, weights: str, pickled: str) -> None:
    from safetensors.torch import load_file

    state = dict(load_file(str(folder / weights)))
    (folder / weights).unlink()
    torch.save({**state, "extra": _Call()}, folder / pickled)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, str]:
    from _mteb_exports import blip_export, open_clip_export

    from vlr_plugins.data import EmbeddingStoreWriter

    root = tmp_path_factory.mktemp("model-folder-catalogue")
    mllm = save_tiny_qwen2vl(root / "tiny-qwen2vl")
    shutil.copytree(mllm, root / "pickled")
    _pickle_weights(root / "pickled", "model.safetensors", "pytorch_model.bin")
    shutil.copytree(root / "pickled", root / "garbled")
    (root / "garbled" / "pytorch_model.bin").write_bytes(b"\x80\x02garbage")  # a pickle opcode, then none torch knows
    shutil.copytree(mllm, root / "noconf")
    (root / "noconf" / "config.json").unlink()
    clip = open_clip_export(root)
    _pickle_weights(clip, "open_clip_model.safetensors", "open_clip_pytorch_model.bin")
    (root / "videos").mkdir()
    write_clip(root / "videos" / "v.mkv", num_frames=8, height=32, width=32)
    (root / "caps.jsonl").write_text(json.dumps({"video": str(root / "videos" / "v.mkv"),
                                                 "caption": "A grey square."}) + "\n")
    from PIL import Image

    from _tiny_mllm import write_nli_csv

    write_nli_csv(root / "nli.csv")
    (root / "images").mkdir()
    Image.new("RGB", (32, 32), (200, 40, 10)).save(root / "images" / "0.png")
    (root / "train.jsonl").write_text(json.dumps({"id": "i0", "image": "images/0.png", "caption": "red"}) + "\n")
    csv = root / "MSRVTT_JSFUSION_test.csv"
    csv.write_text("key,vid_key,video_id,sentence\n" + "".join(
        f"ret{i},msr{vid[5:]},{vid},\"{text}\"\n" for i, (vid, text) in enumerate(MSRVTT.items())))
    with EmbeddingStoreWriter(root / "store", 32, meta={"encoder": "tiny", "frames": 4, "sampler": "uniform"}) as w:
        w.add(list(MSRVTT), torch.nn.functional.normalize(torch.randn(len(MSRVTT), 32), dim=-1))
    return {"mllm": str(mllm), "pickled": str(root / "pickled"), "garbled": str(root / "garbled"), "noconf": str(root / "noconf"),
            "export": str(blip_export(root)), "clip": str(clip), "videos": str(root / "videos"),
            "caps": str(root / "caps.jsonl"), "nli": str(root / "nli.csv"), "jsonl": str(root / "train.jsonl"), "csv": str(csv),
            "store": str(root / "store")}


BENCH = "benchmarks:\n  - {name: msrvtt, reader: msrvtt, path: {csv}, item_embeddings: {store}}\n"


def _caption(model: str, out: str = "{tmp}/caps.jsonl") -> list[str]:
    return ["caption", "--model", model, "--videos", "{videos}", "--out", out, "--settings", "care_stage1"]


def _lens(model: str) -> list[str]:
    return ["lens", "--model", model, "--text", "a dog", "--out", "{tmp}/lens"]


def _stage1(pretrained: str) -> list[str]:
    return ["train", "care/stage1", "--train", "{caps}", "--work-dir", "{tmp}/run", "--set",
            f"model.pretrained={pretrained}", "train_dataloader.dataset.processor={mllm}",
            "model.gradient_checkpointing=false", "train_dataloader.batch_size=1", "train_dataloader.num_workers=0",
            "train_dataloader.persistent_workers=false", "train_dataloader.dataset.num_frames=2",
            "train_dataloader.dataset.max_pixels=3136", "train_cfg.max_iters=1",
            "optim_wrapper={type: OptimWrapper, optimizer: {type: AdamW, lr: 0.001}}",
            # MMEngine keeps one visualizer per experiment name in the process
            "experiment_name=catalogue_{name}"]


def _stage2(pretrained: str) -> list[str]:
    return ["train", "care/stage2_paper", "--train", "{nli}", "--work-dir", "{tmp}/run", "--set",
            f"model.embedder.pretrained={pretrained}", "train_dataloader.dataset.tokenizer={mllm}",
            "train_dataloader.batch_size=2", "train_dataloader.num_workers=0",
            "train_dataloader.persistent_workers=false", "train_cfg.max_epochs=1",
            "optim_wrapper={type: OptimWrapper, optimizer: {type: AdamW, lr: 0.01}}", "env_cfg.dist_cfg.backend=gloo",
            "experiment_name=catalogue_{name}"]


CASES = [
    # case, files written, command line, named in the message
    ("precompute: mllm: weights that are a pickle", {},
     ["precompute", "--videos", "{videos}", "--encoder", "mllm:{pickled}", "--frames", "4", "--out", "{tmp}/out",
      "--workers", "0"],
     ["--encoder", "{pickled}/pytorch_model.bin", REFUSED, "posix.getcwd"]),
    ("eval: mllm: weights that are a pickle", {"bench.yaml": BENCH},
     ["eval", "--model", "mllm:{pickled}", "--benchmarks", "{tmp}/bench.yaml", "--out", "{tmp}/out",
      "--protocol", "none"],
     ["--model", "{pickled}/pytorch_model.bin", REFUSED]),
    ("eval: open_clip:local-dir: weights that are a pickle", {"bench.yaml": BENCH},
     ["eval", "--model", "open_clip:local-dir:{clip}", "--benchmarks", "{tmp}/bench.yaml", "--out", "{tmp}/out",
      "--protocol", "none"],
     ["--model", "{clip}/open_clip_pytorch_model.bin", REFUSED]),
    ("caption: weights that are a pickle", {}, _caption("{pickled}"),
     ["--model", "{pickled}/pytorch_model.bin", REFUSED]),
    ("caption: a folder without config.json", {}, _caption("{noconf}"),
     ["--model", "{noconf} holds no config.json"]),
    ("caption: a BERT folder", {"bert/config.json": BERT}, _caption("{tmp}/bert"),
     ["--model", "{tmp}/bert/config.json", "no multimodal LLM", "model_type 'bert'", "BertModel", "vlr caption"]),
    ("caption: a vlr export of a text encoder", {}, _caption("{export}"),
     ["--model", "{export}/config.json", "no multimodal LLM", "model_type 'vlr_blip_text_encoder'",
      "image-text-to-text"]),
    ("caption: a model folder that is not there", {}, _caption("{tmp}/care-7b"),
     ["--model", "no such folder: {tmp}/care-7b"]),
    ("caption: --out in a folder that is a file", {"file.txt": "x"}, _caption("{mllm}", "{tmp}/file.txt/caps.jsonl"),
     ["--out", "{tmp}/file.txt", "is a file"]),
    ("lens: weights that are a pickle", {}, _lens("{pickled}"), ["--model", "{pickled}/pytorch_model.bin", REFUSED]),
    ("lens: weights that are no PyTorch file", {}, _lens("{garbled}"),
     ["--model", "{garbled}/pytorch_model.bin", "is not a PyTorch weights file"]),
    ("lens: a folder without config.json", {}, _lens("{noconf}"),
     ["--model", "the folder {noconf} has no config.json", "transformers model folder"]),
    ("lens: an absolute path that is not there", {}, _lens("{tmp}/missing/folder"),
     ["--model", "'{tmp}/missing/folder'", "no such folder", "not looked up on the Hugging Face Hub"]),
    ("lens: a relative path that is not there", {}, _lens("./missing"),
     ["--model", "'./missing'", "no such folder"]),
    ("train care/stage1: model.pretrained weights that are a pickle", {}, _stage1("{pickled}"),
     ["model.pretrained", "{pickled}/pytorch_model.bin", REFUSED]),
    ("train care/stage1: model.pretrained without config.json", {}, _stage1("{noconf}"),
     ["model.pretrained", "the folder {noconf} has no config.json"]),
    ("train care/stage2: model.embedder.pretrained weights that are a pickle", {}, _stage2("{pickled}"),
     ["model.embedder.pretrained", "{pickled}/pytorch_model.bin", REFUSED]),
    ("train care/stage2: model.embedder.pretrained without config.json", {}, _stage2("{noconf}"),
     ["model.embedder.pretrained", "the folder {noconf} has no config.json"]),
    ("openclip-train: local-dir: weights that are a pickle", {},
     ["openclip-train", "--model", "local-dir:{clip}", "--train-data", "{jsonl}", "--epochs", "1", "--batch-size",
      "1", "--workers", "0", "--device", "cpu", "--logs", "{tmp}/logs", "--name", "run", "--precision", "fp32"],
     ["--model", "{clip}/open_clip_pytorch_model.bin", REFUSED, "posix.getcwd"]),
]


@pytest.mark.parametrize("files, argv, where", [pytest.param(*row[1:], id=row[0]) for row in CASES])
def test_a_model_folder_is_refused_in_one_line(files, argv, where, tmp_path, world):
    if argv[0] == "openclip-train":
        pytest.importorskip("open_clip_train")
    if argv[0] == "train":
        pytest.importorskip("mmengine.registry")
    places = {**world, "tmp": str(tmp_path), "name": tmp_path.name}
    write_files(tmp_path, files, places)
    before = tree(tmp_path)
    assert_refused([fill(a, places) for a in argv], *[fill(w, places) for w in where],
                   leaves=[tmp_path / "out", tmp_path / "caps.jsonl", tmp_path / "lens", tmp_path / "run",
                           tmp_path / "logs"], cwd=tmp_path)
    assert tree(tmp_path) == before, "the folder changed"


@pytest.mark.skipif(AS_ROOT, reason="root writes into a read-only folder")
def test_captions_into_a_read_only_folder_are_refused_before_the_model_loads(tmp_path, world):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        # {pickled} would be refused when loaded: the --out check comes first
        assert_refused([fill(a, {**world, "tmp": str(tmp_path)}) for a in _caption("{pickled}", str(out / "c.jsonl"))],
                       "--out", str(out), "not writable")
    finally:
        out.chmod(0o755)
    assert list(out.iterdir()) == []


def test_the_catalogue_covers_every_loader():
    commands = {row[2][0] for row in CASES}
    assert commands == {"precompute", "eval", "caption", "lens", "train", "openclip-train"}
