"""The bad-input catalogue of ``mllm:FOLDER[:PROMPT]`` specs: ``vlr eval --model`` and ``vlr
precompute --encoder`` with a folder that is not there, a folder that holds no model or no
multimodal LLM, and a prompt name that is not shipped; and their ``--model-dtype``: a dtype
that is not one, one given for a model that is not ``mllm:``, and a store resumed at another
dtype than its rows were written at.

Each row is a real bad input, written by the test into an empty folder (the command's working
directory); every case must exit 2 without a traceback (``_refusal.assert_refused``), write
nothing, and leave the folder as it was.

Placeholders: ``{tmp}`` the case's folder, ``{mllm}`` a tiny random Qwen2-VL saved with its
processor, ``{csv}`` an MSR-VTT 1k-A file of three videos, ``{store}`` their 32-d store,
``{videos}`` a folder of one video, ``{images}`` a folder of one image.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _refusal import assert_refused, fill, run_vlr, tree, write_files

pytest.importorskip("transformers")
pytest.importorskip("torchvision")
pytest.importorskip("av")

from _tiny_mllm import save_tiny_qwen2vl  # noqa: E402
from _videos import write_video  # noqa: E402

MSRVTT = {"video7579": "a girl puts a sweater on a dog", "video7725": "people clap in a room",
          "video9258": "a man talks, then he sings"}
BERT = json.dumps({"model_type": "bert", "hidden_size": 32, "num_hidden_layers": 1})
QWEN2_LM = json.dumps({"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 32})


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, str]:
    from PIL import Image

    from vlr_plugins.data import EmbeddingStoreWriter

    root = tmp_path_factory.mktemp("mllm-catalogue")
    save_tiny_qwen2vl(root / "tiny-qwen2vl")
    csv = root / "MSRVTT_JSFUSION_test.csv"
    csv.write_text("key,vid_key,video_id,sentence\n" + "".join(
        f"ret{i},msr{vid[5:]},{vid},\"{text}\"\n" for i, (vid, text) in enumerate(MSRVTT.items())))
    with EmbeddingStoreWriter(root / "store", 32, meta={"encoder": "tiny", "frames": 4, "sampler": "uniform"}) as w:
        w.add(list(MSRVTT), torch.nn.functional.normalize(torch.randn(len(MSRVTT), 32), dim=-1))
    (root / "videos").mkdir()
    write_video(root / "videos" / "clip", num_frames=8)
    (root / "images").mkdir()
    Image.new("RGB", (32, 24), (200, 40, 10)).save(root / "images" / "red.png")
    return {"mllm": str(root / "tiny-qwen2vl"), "csv": str(csv), "store": str(root / "store"),
            "videos": str(root / "videos"), "images": str(root / "images")}


BENCH = "benchmarks:\n  - {name: msrvtt, reader: msrvtt, path: {csv}, item_embeddings: {store}}\n"


def _eval(model: str) -> list[str]:
    return ["eval", "--model", model, "--benchmarks", "{tmp}/bench.yaml", "--out", "{tmp}/results",
            "--protocol", "none"]


def _precompute(encoder: str, out: str = "{tmp}/results") -> list[str]:
    return ["precompute", "--videos", "{videos}", "--encoder", encoder, "--frames", "4", "--out", out,
            "--workers", "0"]


def _store_at(model_dtype: str):
    """A file-table entry: the store of ``{videos}`` by ``{mllm}``, written at ``model_dtype``."""
    def write(path: Path, places: dict[str, str]) -> None:
        argv = [fill(a, places) for a in _precompute("mllm:{mllm}", str(path))] + ["--model-dtype", model_dtype]
        code, _, err = run_vlr(argv)
        assert code == 0, err

    return write


CASES = [
    # case, files written, command line, named in the message
    ("eval: a model folder that is not there", {}, _eval("mllm:{tmp}/care-7b"),
     ["--model", "'mllm:{tmp}/care-7b'", "no such folder: {tmp}/care-7b"]),
    ("eval: a folder that holds no model", {"empty": None}, _eval("mllm:{tmp}/empty:care"),
     ["--model", "{tmp}/empty holds no config.json", "mllm:FOLDER[:PROMPT]"]),
    ("eval: a folder of a text encoder, not an MLLM", {"bert/config.json": BERT}, _eval("mllm:{tmp}/bert"),
     ["--model", "{tmp}/bert/config.json", "no multimodal LLM", "'bert'"]),
    ("eval: a folder of a text-only language model", {"lm/config.json": QWEN2_LM}, _eval("mllm:{tmp}/lm:e5v"),
     ["--model", "{tmp}/lm/config.json", "no multimodal LLM", "'qwen2'"]),
    ("eval: a prompt name that is not shipped", {}, _eval("mllm:{mllm}:carebench"),
     ["--model", "no EOL prompt named 'carebench'", "care, care_train, e5v, e5v_train"]),
    ("eval: mllm: and nothing else", {}, _eval("mllm:"), ["--model", "names no model folder", "mllm:FOLDER"]),
    ("precompute: a model folder that is not there", {}, _precompute("mllm:{tmp}/care-7b:care"),
     ["--encoder", "no such folder: {tmp}/care-7b"]),
    ("precompute: a folder of a text encoder, not an MLLM", {"bert/config.json": BERT},
     _precompute("mllm:{tmp}/bert"), ["--encoder", "{tmp}/bert/config.json", "no multimodal LLM"]),
    ("precompute: a prompt name that is not shipped", {}, _precompute("mllm:{mllm}:E5V"),
     ["--encoder", "no EOL prompt named 'E5V'", "care, care_train, e5v, e5v_train"]),
    ("eval: a model dtype that is not one", {}, _eval("mllm:{mllm}") + ["--model-dtype", "fp8"],
     ["--model-dtype", "invalid choice: 'fp8'", "'auto', 'float32', 'bfloat16', 'float16'"]),
    ("eval: a model dtype for a model that is not mllm:", {}, _eval("{tmp}/c5.pth") + ["--model-dtype", "float32"],
     ["--model-dtype", "float32 is for mllm:FOLDER[:PROMPT] models", "--model '{tmp}/c5.pth'"]),
    ("precompute: a model dtype for a video tower that is not mllm:", {},
     _precompute("open_clip:ViT-B-32") + ["--model-dtype", "bfloat16"],
     ["--model-dtype", "bfloat16 is for mllm:FOLDER[:PROMPT] models", "--encoder 'open_clip:ViT-B-32'"]),
    ("precompute: a store resumed at another model dtype", {"store": _store_at("float32")},
     _precompute("mllm:{mllm}", "{tmp}/store") + ["--resume", "--model-dtype", "bfloat16"],
     ["cannot resume the embedding store {tmp}/store", "model_dtype: 'float32' there, 'bfloat16' now",
      "--overwrite"]),
    ("precompute images: a model folder that is not there", {},
     ["precompute", "--images", "{images}", "--encoder", "mllm:{tmp}/e5v-8b", "--out", "{tmp}/results"],
     ["--encoder", "no such folder: {tmp}/e5v-8b"]),
]


@pytest.mark.parametrize("files, argv, where", [pytest.param(*row[1:], id=row[0]) for row in CASES])
def test_mllm_spec_refuses(files, argv, where, tmp_path, world):
    places = {**world, "tmp": str(tmp_path)}
    write_files(tmp_path, {"bench.yaml": BENCH, **files}, places)
    before = tree(tmp_path)
    assert_refused([fill(a, places) for a in argv], *[fill(w, places) for w in where],
                   leaves=[tmp_path / "results"], cwd=tmp_path)
    assert tree(tmp_path) == before, "the folder changed"


def test_the_catalogue_covers_both_commands():
    commands = {row[2][0] for row in CASES}
    assert commands == {"eval", "precompute"} and len(CASES) >= 3
