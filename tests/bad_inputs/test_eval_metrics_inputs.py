"""The bad-input catalogue of ``vlr eval --metrics`` (and what reads the metrics: ``--tables``,
``--truncation-metric``, ``--capst``): unknown names, K < 1, a name twice, K larger than a benchmark's
gallery, a table or a plot of a metric the run does not compute.

Each row is a real bad input written by the test into an empty folder (the command's working
directory): a retrieval_jsonl benchmark of 3 items and 5 texts, its store and a
``module:callable`` text model. Every case must exit 2 without a traceback
(``_refusal.assert_refused``), write no results, and leave the folder exactly as it was.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from _refusal import assert_refused, fill, tree, write_files

TEXTS = {"v0": ["a dog runs", "a dog"], "v1": ["two red cars"], "v2": ["a bowl of soup", "soup"]}
VECTORS = {"a dog runs": [1.0, 0.2, 0.0], "a dog": [0.9, 0.0, 0.1], "two red cars": [0.0, 1.0, 0.3],
           "a bowl of soup": [0.1, 0.1, 1.0], "soup": [0.0, 0.3, 0.8]}
MODEL = (f"import torch\n\nVECTORS = {json.dumps(VECTORS)}\n\nclass Model:\n    embed_dim = 3\n\n"
         "    def encode_text(self, texts):\n        return torch.tensor([VECTORS[t] for t in texts])\n")
BENCH = "benchmarks:\n  - {name: toy, reader: retrieval_jsonl, path: split.jsonl, item_embeddings: store}\n"


def _store(path: Path, places: dict[str, str]) -> None:
    import torch

    from vlr_plugins.data import EmbeddingStoreWriter

    with EmbeddingStoreWriter(path, 3) as writer:
        writer.add(list(TEXTS), torch.eye(3))


def _eval(*more: str) -> list[str]:
    return ["eval", "--model", "toy_catalogue_model:Model", "--benchmarks", "{tmp}/bench.yaml", "--out",
            "{tmp}/results", "--protocol", "none", *more]


CASES = [
    # case, command line, named in the message
    ("metrics: an unknown name", _eval("--metrics", "r@1,median"),
     ["--metrics", "unknown metric 'median'", "r@K, mdr, mnr, mrr@K"]),
    ("metrics: a rank metric without its K", _eval("--metrics", "mrr"), ["--metrics", "unknown metric 'mrr'"]),
    ("metrics: K = 0", _eval("--metrics", "r@0"), ["--metrics", "'r@0'", "K must be >= 1"]),
    ("metrics: MRR at K = 0", _eval("--metrics", "mrr@0"), ["--metrics", "'mrr@0'", "K must be >= 1"]),
    ("metrics: a name twice", _eval("--metrics", "r@1,mdr,MdR"), ["--metrics", "mdr named twice"]),
    ("metrics: recall at K past the item gallery", _eval("--metrics", "r@1,r@5"),
     ["--metrics", "r@5", "'toy'", "{tmp}/bench.yaml, benchmark 1", "3 items", "5 texts", "K <= 3"]),
    ("metrics: MRR at K past the item gallery", _eval("--metrics", "mrr@4"),
     ["--metrics", "mrr@4", "'toy'", "3 items", "5 texts"]),
    ("tables: a table of MdR/MnR without them", _eval("--tables", "clip4clip-msrvtt"),
     ["--tables", "clip4clip-msrvtt shows mdr, mnr", "--metrics r@1,r@5,r@10,mdr,mnr"]),
    ("tables: ReBias without the recalls it reads", _eval("--metrics", "r@1,mdr", "--tables", "carebench-table4"),
     ["--tables", "carebench-table4 shows r@5, r@10", "--metrics r@1,mdr,r@5,r@10"]),
    ("capst: the unified score without R@1", _eval("--metrics", "mdr,mnr", "--capst", "{tmp}/capst.json"),
     ["--capst", "reads R@1", "add r@1 to --metrics"]),
    ("truncation-metric: without a sweep", _eval("--metrics", "r@1,mdr", "--truncation-metric", "mdr"),
     ["--truncation-metric", "give --truncation"]),
    ("truncation-metric: a metric not computed",
     _eval("--metrics", "r@1", "--truncation", "20,40", "--truncation-metric", "mdr"),
     ["--truncation-metric", "mdr is not computed", "--metrics r@1"]),
    ("truncation-metric: an unknown name", _eval("--truncation", "20,40", "--truncation-metric", "mrr@x"),
     ["--truncation-metric", "unknown metric 'mrr@x'"]),
]


@pytest.mark.parametrize("argv, where", [pytest.param(*row[1:], id=row[0]) for row in CASES])
def test_eval_metrics_refuses(argv, where, tmp_path, monkeypatch):
    places = {"tmp": str(tmp_path)}
    lines = "".join(json.dumps({"id": i, "texts": ts}) + "\n" for i, ts in TEXTS.items())
    write_files(tmp_path, {"bench.yaml": BENCH, "split.jsonl": lines, "store": _store,
                           "toy_catalogue_model.py": MODEL}, places)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # an imported model module leaves no __pycache__
    before = tree(tmp_path)
    assert_refused([fill(a, places) for a in argv], *[fill(w, places) for w in where],
                   leaves=[tmp_path / "results"], cwd=tmp_path)
    assert tree(tmp_path) == before, "the folder changed"


def test_the_catalogue_covers_every_metric_option():
    options = {a for row in CASES for a in row[1] if a.startswith("--")}
    assert {"--metrics", "--tables", "--truncation-metric", "--capst"} <= options


@pytest.mark.parametrize(("variable", "value", "expected"), [
    ("VLR_CPU_BLAS", "mkl", "expected one of torch, numpy, onednn, auto"),
    ("VLR_CPU_BLAS", "openblas", "expected one of torch, numpy, onednn, auto"),
    ("VLR_CPU_TILE_ELEMS", "big", "expected auto, l2 or a number of scores per thread"),
    ("VLR_CPU_TILE_ELEMS", "100", "at least 1024"),
    ("VLR_COUNT_KERNEL", "cython", "expected one of numba, torch, auto"),
])
def test_eval_and_mine_refuse_an_unknown_cpu_setting(variable, value, expected, tmp_path, monkeypatch):
    """``VLR_CPU_BLAS`` (the engine's CPU tile BLAS), ``VLR_CPU_TILE_ELEMS`` (its scores per
    thread) and ``VLR_COUNT_KERNEL`` (its counting loop) checked before anything is read or encoded."""
    places = {"tmp": str(tmp_path)}
    lines = "".join(json.dumps({"id": i, "texts": ts}) + "\n" for i, ts in TEXTS.items())
    write_files(tmp_path, {"bench.yaml": BENCH, "split.jsonl": lines, "store": _store,
                           "toy_catalogue_model.py": MODEL}, places)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setenv(variable, value)
    before = tree(tmp_path)
    where = [variable, repr(value), expected]
    assert_refused([fill(a, places) for a in _eval()], *where, leaves=[tmp_path / "results"], cwd=tmp_path)
    assert_refused(["mine", "paragraph", str(tmp_path / "split.jsonl"), "--model", "toy_catalogue_model:Model",
                    "--out", str(tmp_path / "mined.jsonl")],
                   *where, leaves=[tmp_path / "mined.jsonl"], cwd=tmp_path)
    assert tree(tmp_path) == before, "the folder changed"
