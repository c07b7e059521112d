"""The bad-input catalogue of ``vlr eval`` on video benchmarks and with the models it now loads:
open_clip / Long-CLIP specs, ``module:callable`` text models, ``--tables``, ``--rerank-k``, and
stores whose recorded frames contradict the protocol.

Each row is a real bad input, written by the test into an empty folder (the command's working
directory): the files, the command line, and the words its one ``error:`` line must hold to
say where the problem is. Every case must exit 2 without a traceback
(``_refusal.assert_refused``), write no results, and leave the folder exactly as it was.

Placeholders: ``{tmp}`` the case's folder, ``{clip}`` a tiny open_clip model folder (32-d,
24 text positions), ``{csv}`` an MSR-VTT 1k-A file of three videos, ``{store}`` their store
(32-d, 16 middle frames recorded), ``{tiny_name}`` an open_clip config registered in this
process and ``{wide}`` a checkpoint of another architecture; ``{longclip_name}`` a tiny
QuickGELU config registered in this process, whose Long-CLIP checkpoints (two 248-row
positional tables) the ``longclip.pt`` cases write.
"""

from __future__ import annotations

import fractions
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from _refusal import assert_refused, fill, tree, write_files

open_clip = pytest.importorskip("open_clip")

from _long_clip import long_clip_state, register_tiny_long_clip  # noqa: E402
from _video_world import MSRVTT, TINY_CLIP, save_tiny_open_clip  # noqa: E402

MVC = "multi-view-captions/zero-shot"


def _store(frames: Any = 16, sampler: Any = "middle", dim: int = 32) -> Callable[[Path, dict[str, str]], None]:
    def make(path: Path, places: dict[str, str]) -> None:
        from vlr_plugins.data import EmbeddingStoreWriter

        meta = {k: v for k, v in (("frames", frames), ("sampler", sampler)) if v is not None}
        with EmbeddingStoreWriter(path, dim, meta={"encoder": "tiny-clip", **meta}) as writer:
            writer.add(list(MSRVTT), torch.nn.functional.normalize(torch.randn(len(MSRVTT), dim), dim=-1))
    return make


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("video-catalogue")
    clip = save_tiny_open_clip(root / "tiny-clip")
    csv = root / "MSRVTT_JSFUSION_test.csv"
    csv.write_text("key,vid_key,video_id,sentence\n" + "".join(
        f"ret{i},msr{vid[5:]},{vid},\"{text}\"\n" for i, (vid, text) in enumerate(MSRVTT.items())))
    _store()(root / "store", {})
    (root / "configs").mkdir()
    (root / "configs" / "vlr-catalogue-tinyclip.json").write_text(json.dumps(TINY_CLIP))
    open_clip.add_model_config(root / "configs")
    wide = root / "wide.pt"
    torch.save(open_clip.CLIP(**{**TINY_CLIP, "embed_dim": 16}).state_dict(), wide)
    longclip_name = register_tiny_long_clip(root / "configs", "vlr-catalogue-longclip")
    return {"clip": str(clip), "csv": str(csv), "store": str(root / "store"), "tiny_name": "vlr-catalogue-tinyclip",
            "wide": str(wide), "longclip_name": longclip_name}


def _long_clip(rows: int = 248, res_rows: int | None = None) -> Callable[[Path, dict[str, str]], None]:
    """A Long-CLIP checkpoint (its two text positional tables cut to ``rows`` / ``res_rows`` rows)."""
    def make(path: Path, places: dict[str, str]) -> None:
        state = long_clip_state()
        state["positional_embedding"] = state["positional_embedding"][:rows]
        state["positional_embedding_res"] = state["positional_embedding_res"][:res_rows or rows]
        torch.save(state, path)
    return make


def _bench(store: str = "{store}", name: str = "msrvtt") -> str:
    return (f"benchmarks:\n  - {{name: {name}, reader: msrvtt, path: {{csv}}, item_embeddings: {store}}}\n")


def _eval(*more: str, model: str = "open_clip:local-dir:{clip}", protocol: str = MVC) -> list[str]:
    return ["eval", "--model", model, "--benchmarks", "{tmp}/bench.yaml", "--out", "{tmp}/results",
            "--protocol", protocol, *more]


def _model(source: str) -> str:
    return "import torch\n\n" + source


ROWS_OF_3 = _model("class Model:\n    def encode_text(self, texts):\n        return torch.zeros(3)\n")
WIDTH_8 = _model("class Model:\n    def encode_text(self, texts):\n        return torch.ones(len(texts), 8)\n")
NO_BUDGET = _model("class Model:\n    embed_dim = 32\n\n    def encode_text(self, texts):\n"
                   "        return torch.ones(len(texts), 32)\n")

CASES = [
    # case, files written, command line, named in the message
    ("model: open_clip: and nothing else", {}, _eval(model="open_clip:"),
     ["--model", "open_clip:MODEL:CHECKPOINT_OR_TAG"]),
    ("model: an open_clip model without weights", {}, _eval(model="open_clip:ViT-B-32"),
     ["--model", "open_clip:MODEL:CHECKPOINT_OR_TAG", "'open_clip:ViT-B-32'"]),
    ("model: an open_clip model that does not exist", {}, _eval(model="open_clip:ViT-B-33:openai"),
     ["--model", "'ViT-B-33'", "ViT-B-32"]),
    ("model: a pretrained tag the model does not have", {}, _eval(model="open_clip:ViT-B-32:openia"),
     ["--model", "'openia'", "openai"]),
    ("model: an open_clip checkpoint that is not there", {}, _eval(model="open_clip:ViT-B-32:{tmp}/epoch_3.pt"),
     ["--model", "{tmp}/epoch_3.pt"]),
    ("model: an open_clip checkpoint that is a folder", {"run": None}, _eval(model="open_clip:ViT-B-32:{tmp}/run"),
     ["--model", "{tmp}/run", "is a folder", "local-dir:"]),
    ("model: an open_clip checkpoint that is a text file", {"clip.pt": "not a checkpoint\n"},
     _eval(model="open_clip:ViT-B-32:{tmp}/clip.pt"), ["{tmp}/clip.pt", "not a PyTorch checkpoint"]),
    ("model: an open_clip checkpoint of pickled objects", {"clip.pt": lambda p, _: torch.save(
        {"state_dict": {}, "lr": fractions.Fraction(1, 3)}, p)},
     _eval(model="open_clip:ViT-B-32:{tmp}/clip.pt"), ["{tmp}/clip.pt", "not a weights-only checkpoint"]),
    ("model: an open_clip .safetensors that is not one", {"clip.safetensors": b"\x00\x01garbage"},
     _eval(model="open_clip:ViT-B-32:{tmp}/clip.safetensors"), ["{tmp}/clip.safetensors", "not a safetensors file"]),
    ("model: a checkpoint of another open_clip architecture", {},
     _eval(model="open_clip:{tiny_name}:{wide}"), ["--model", "{wide}", "does not hold weights", "{tiny_name}"]),
    ("model: a local-dir folder that is not there", {}, _eval(model="open_clip:local-dir:{tmp}/clip-folder"),
     ["--model", "{tmp}/clip-folder", "no open_clip model"]),
    ("model: a local-dir folder without weights", {"bare/open_clip_config.json": json.dumps({"model_cfg": TINY_CLIP})},
     _eval(model="open_clip:local-dir:{tmp}/bare"), ["--model", "{tmp}/bare", "holds no weights"]),
    ("model: a Long-CLIP checkpoint whose positional_embedding_res has another shape",
     {"longclip.pt": _long_clip(res_rows=247)}, _eval(model="open_clip:{longclip_name}-ctx248:{tmp}/longclip.pt"),
     ["{tmp}/longclip.pt", "field 'positional_embedding_res'", "(248, 32); found (247, 32)"]),
    ("model: a Long-CLIP checkpoint without the 248-row context", {"longclip.pt": _long_clip(rows=77)},
     _eval(model="open_clip:{longclip_name}-ctx248:{tmp}/longclip.pt"),
     ["{tmp}/longclip.pt", "field 'positional_embedding'", "masks 248 rows", "(77, 32)"]),
    ("model: a Long-CLIP checkpoint under another context length", {"longclip.pt": _long_clip()},
     _eval(model="open_clip:{longclip_name}-ctx96:{tmp}/longclip.pt"),
     ["{tmp}/longclip.pt", "'positional_embedding_res'", "{longclip_name}-ctx96 has 96", "{longclip_name}-ctx248"]),
    ("model: a Long-CLIP checkpoint under a 77-token name", {"longclip.pt": _long_clip()},
     _eval(model="open_clip:{longclip_name}:{tmp}/longclip.pt"),
     ["--model", "{tmp}/longclip.pt", "'positional_embedding_res'", "open_clip:{longclip_name}-ctx248:"]),
    ("model: a Long-CLIP checkpoint in a model without QuickGELU", {"longclip.pt": _long_clip()},
     _eval(model="open_clip:{tiny_name}-ctx248:{tmp}/longclip.pt"),
     ["{tmp}/longclip.pt", "'positional_embedding_res'", "runs QuickGELU", "{tiny_name}-ctx248"]),
    ("model: an hf-hub model that is not downloaded (offline)", {}, _eval(model="open_clip:hf-hub:nobody/no-such-clip"),
     ["--model", "'nobody/no-such-clip'", "docs/quickstart.md (offline use)"]),
    ("model: a module that is not there", {}, _eval(model="toy_absent_model:Model"),
     ["--model", "cannot import 'toy_absent_model'", "{tmp}"]),
    ("model: a module attribute without encode_text", {"toy_value_model.py": "WIDTH = 3\n"},
     _eval(model="toy_value_model:WIDTH"), ["--model", "'toy_value_model:WIDTH'", "no encode_text"]),
    ("model: encode_text returns one row for all texts", {"toy_rows_model.py": ROWS_OF_3},
     _eval(model="toy_rows_model:Model"), ["Model.encode_text returned shape (3,) for 1 texts"]),
    ("model: texts embedded narrower than the store", {"toy_width_model.py": WIDTH_8},
     _eval(model="toy_width_model:Model"), ["{tmp}/bench.yaml", "'item_embeddings'", "32-d", "8-d"]),
    ("model: a budget for a model that takes none", {"toy_budget_model.py": NO_BUDGET},
     _eval("--budget", "msrvtt=20", model="toy_budget_model:Model"), ["'msrvtt'", "takes no max_tokens"]),
    ("tokenizer: given with an open_clip model", {}, _eval("--tokenizer", "bert-base-uncased"),
     ["--tokenizer", "tokenizes its texts itself"]),
    ("truncation: with an open_clip model", {}, _eval("--truncation", "20,40"), ["--truncation", "tokenizes"]),
    ("budget: past the open_clip model's positions", {}, _eval("--budget", "msrvtt=30"),
     ["--budget", "msrvtt=30", "24 positions"]),
    ("tables: a table that does not exist", {}, _eval("--tables", "mvc-table9"),
     ["--tables", "'mvc-table9'", "mvc-table1, mvc-table3, carebench-table3, carebench-table4"]),
    ("tables: a table none of whose benchmarks is scored", {}, _eval("--tables", "carebench-table4"),
     ["--tables", "carebench-table4", "carebench/spatial", "scores: msrvtt"]),
    ("tables: a table named twice", {}, _eval("--tables", "mvc-table1,mvc-table1"), ["--tables", "twice"]),
    ("rerank-k: zero", {}, _eval("--rerank-k", "0"), ["--rerank-k", "positive integer"]),
    ("rerank-k: a model without a matching head", {}, _eval("--rerank-k", "128"), ["--rerank-k", "match_scores"]),
    ("store: embedded from 8 frames, the protocol says 16", {"store8": _store(8), "bench.yaml": _bench("store8")},
     _eval(), ["{tmp}/bench.yaml", "benchmark 1", "'item_embeddings'", "{tmp}/store8", "8 frames, sampler middle",
               "16 frames, sampler middle", MVC]),
    ("store: random frames, the protocol says middle", {"rand": _store(16, "rand"), "bench.yaml": _bench("rand")},
     _eval(), ["{tmp}/rand", "16 frames, sampler rand", MVC]),
    ("store: CaReBench's 32 frames under the MVC protocol", {"s32": _store(32, "uniform"), "bench.yaml": _bench("s32")},
     _eval(), ["{tmp}/s32", "32 frames, sampler uniform", "16 frames, sampler middle"]),
    ("store: a frame count that is not an integer", {"odd": _store("16"), "bench.yaml": _bench("odd")}, _eval(),
     ["{tmp}/odd/index.json", "'meta.frames'", "'16'"]),
    ("store: a sampler that is no strategy", {"odd": _store(16, "even"), "bench.yaml": _bench("odd")}, _eval(),
     ["{tmp}/odd/index.json", "'meta.sampler'", "'even'"]),
]


@pytest.mark.parametrize("files, argv, where", [pytest.param(*row[1:], id=row[0]) for row in CASES])
def test_video_eval_refuses(files, argv, where, tmp_path, world, monkeypatch):
    places = {**world, "tmp": str(tmp_path)}
    files = {"bench.yaml": _bench(), **files}
    write_files(tmp_path, files, places)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # an imported model module leaves no __pycache__
    before = tree(tmp_path)
    assert_refused([fill(a, places) for a in argv], *[fill(w, places) for w in where],
                   leaves=[tmp_path / "results"], cwd=tmp_path)
    assert tree(tmp_path) == before, "the folder changed"


def test_the_catalogue_covers_every_new_option():
    options = {a for row in CASES for a in row[2] if a.startswith("--")}
    assert {"--tables", "--rerank-k", "--tokenizer", "--truncation", "--budget"} <= options
    assert len(CASES) >= 10
