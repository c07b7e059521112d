"""The bad-input catalogue of ``vlr eval --renorm`` and its settings: a setting without its method,
QB-Norm without a bank, renorm with re-ranking, a temperature, beta or k out of
range, and query banks that are missing, empty, of the wrong kind, malformed, or of another
dimension than the benchmark's items.

Each row is a real bad input written by the test into an empty folder (the command's working
directory): a retrieval_jsonl benchmark of 3 items and 5 texts, its 3-d store and a
``module:callable`` text model, and the banks. Every case must exit 2 without a traceback
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
           "a bowl of soup": [0.1, 0.1, 1.0], "soup": [0.0, 0.3, 0.8], "a cat": [0.5, 0.5, 0.0]}
MODEL = (f"import torch\n\nVECTORS = {json.dumps(VECTORS)}\n\nclass Model:\n    embed_dim = 3\n\n"
         "    def encode_text(self, texts):\n        return torch.tensor([VECTORS[t] for t in texts])\n")
BENCH = "benchmarks:\n  - {name: toy, reader: retrieval_jsonl, path: split.jsonl, item_embeddings: store}\n"


def _store(dim: int, rows: int):
    def write(path: Path, places: dict[str, str]) -> None:
        import torch

        from vlr_plugins.data import EmbeddingStoreWriter

        with EmbeddingStoreWriter(path, dim) as writer:
            if rows:
                writer.add([f"t{i}" for i in range(rows)], torch.rand(rows, dim) + 0.1)
    return write


def _eval(*more: str) -> list[str]:
    return ["eval", "--model", "toy_renorm_catalogue:Model", "--benchmarks", "{tmp}/bench.yaml", "--out",
            "{tmp}/results", "--protocol", "none", *more]


def _qb(*more: str) -> list[str]:
    return _eval("--renorm", "qbnorm", *more)


CASES = [
    # case, command line, named in the message
    ("renorm: an unknown method", _eval("--renorm", "softmax"), ["--renorm", "invalid choice: 'softmax'"]),
    ("renorm: qbnorm without a bank", _qb(), ["--renorm", "needs a query bank", "--query-bank-texts",
                                              "--query-bank-items"]),
    ("renorm: a bank without --renorm", _eval("--query-bank-texts", "{tmp}/bank.txt"),
     ["--query-bank-texts", "setting of --renorm qbnorm", "give --renorm qbnorm too"]),
    ("renorm: beta without --renorm", _eval("--qb-beta", "10"), ["--qb-beta", "give --renorm qbnorm too"]),
    ("renorm: a QB-Norm setting with dsl", _eval("--renorm", "dsl", "--qb-k", "2"),
     ["--qb-k", "setting of --renorm qbnorm", "this run has --renorm dsl"]),
    ("renorm: a bank with dsl", _eval("--renorm", "dsl", "--query-bank-items", "{tmp}/bank_store"),
     ["--query-bank-items", "this run has --renorm dsl"]),
    ("renorm: the DSL temperature with qbnorm", _qb("--query-bank-texts", "{tmp}/bank.txt", "--dsl-temperature", "50"),
     ["--dsl-temperature", "setting of --renorm dsl", "this run has --renorm qbnorm"]),
    ("renorm: with re-ranking", _eval("--renorm", "dsl", "--rerank-k", "2"), ["--rerank-k", "--renorm dsl",
                                                                               "choose one"]),
    ("renorm: temperature 0", _eval("--renorm", "dsl", "--dsl-temperature", "0"),
     ["--dsl-temperature", "(0, 300]", "0.0"]),
    ("renorm: temperature nan", _eval("--renorm", "dsl", "--dsl-temperature", "nan"),
     ["--dsl-temperature", "(0, 300]"]),
    ("renorm: temperature not a number", _eval("--renorm", "dsl", "--dsl-temperature", "hot"),
     ["--dsl-temperature", "invalid float value"]),
    ("renorm: beta negative", _qb("--query-bank-texts", "{tmp}/bank.txt", "--qb-beta", "-1"),
     ["--qb-beta", "(0, 300]", "-1.0"]),
    ("renorm: beta too large", _qb("--query-bank-texts", "{tmp}/bank.txt", "--qb-beta", "1000"),
     ["--qb-beta", "(0, 300]"]),
    ("renorm: k = 0", _qb("--query-bank-texts", "{tmp}/bank.txt", "--qb-k", "0"), ["--qb-k", ">= 1"]),
    ("renorm: k not an integer", _qb("--query-bank-texts", "{tmp}/bank.txt", "--qb-k", "1.5"),
     ["--qb-k", "invalid int value"]),
    ("text bank: missing", _qb("--query-bank-texts", "{tmp}/nowhere.txt"),
     ["--query-bank-texts", "no such file", "{tmp}/nowhere.txt"]),
    ("text bank: only blank lines", _qb("--query-bank-texts", "{tmp}/blank.txt"),
     ["--query-bank-texts", "{tmp}/blank.txt", "holds no texts"]),
    ("text bank: an empty JSON Lines file", _qb("--query-bank-texts", "{tmp}/empty.jsonl"),
     ["--query-bank-texts", "{tmp}/empty.jsonl", "holds no texts"]),
    ("text bank: a folder", _qb("--query-bank-texts", "{tmp}/bank_store"),
     ["--query-bank-texts", "is a folder", "--query-bank-items"]),
    ("text bank: an unknown suffix", _qb("--query-bank-texts", "{tmp}/bench.yaml"),
     ["--query-bank-texts", "{tmp}/bench.yaml", ".txt, .jsonl"]),
    ("text bank: a number among JSON strings", _qb("--query-bank-texts", "{tmp}/mixed.jsonl"),
     ["{tmp}/mixed.jsonl", "line 2", "non-empty JSON string"]),
    ("text bank: records of no known kind", _qb("--query-bank-texts", "{tmp}/odd.jsonl"),
     ["{tmp}/odd.jsonl", "line 1", "retrieval split", "paragraph sample"]),
    ("text bank: a text record without its text", _qb("--query-bank-texts", "{tmp}/texts.jsonl"),
     ["{tmp}/texts.jsonl", "line 3", "\"text\""]),
    ("text bank: a paragraph sample with an empty caption", _qb("--query-bank-texts", "{tmp}/samples.jsonl"),
     ["{tmp}/samples.jsonl", "line 2", "caption"]),
    ("text bank: not JSON", _qb("--query-bank-texts", "{tmp}/broken.jsonl"),
     ["{tmp}/broken.jsonl", "line 2", "invalid JSON"]),
    ("bank fields: without a text bank", _qb("--query-bank-items", "{tmp}/bank_store", "--query-bank-fields",
                                             "paragraph"),
     ["--query-bank-fields", "give that bank too"]),
    ("bank fields: without --renorm", _eval("--query-bank-fields", "paragraph"),
     ["--query-bank-fields", "give --renorm qbnorm too"]),
    ("bank fields: on a bank of plain texts", _qb("--query-bank-texts", "{tmp}/bank.txt", "--query-bank-fields",
                                                  "caption"),
     ["--query-bank-fields", "{tmp}/bank.txt", "text lines", "paragraph or MVC samples"]),
    ("bank fields: a paragraph sample's unknown field", _qb("--query-bank-texts", "{tmp}/paragraphs.jsonl",
                                                            "--query-bank-fields", "caption,paragraf"),
     ["--query-bank-fields", "{tmp}/paragraphs.jsonl", "no text field 'paragraf'", "did you mean 'paragraph'?"]),
    ("bank fields: an MVC sample's unknown field", _qb("--query-bank-texts", "{tmp}/mvc.jsonl",
                                                       "--query-bank-fields", "D3"),
     ["--query-bank-fields", "{tmp}/mvc.jsonl", "MVC samples", "no text field 'D3'", "D1*"]),
    ("bank fields: a name twice", _qb("--query-bank-texts", "{tmp}/paragraphs.jsonl", "--query-bank-fields",
                                      "paragraph,paragraph"),
     ["--query-bank-fields", "'paragraph' named twice"]),
    ("bank fields: an empty name", _qb("--query-bank-texts", "{tmp}/paragraphs.jsonl", "--query-bank-fields",
                                       "caption,"),
     ["--query-bank-fields", "field names separated by commas"]),
    ("bank fields: no sample has the field", _qb("--query-bank-texts", "{tmp}/samples_ok.jsonl",
                                                 "--query-bank-fields", "paragraph"),
     ["--query-bank-texts", "{tmp}/samples_ok.jsonl", "holds no texts", "paragraph samples (paragraph)"]),
    ("item bank: missing", _qb("--query-bank-items", "{tmp}/no_store"),
     ["--query-bank-items", "no embedding store at {tmp}/no_store"]),
    ("item bank: a file", _qb("--query-bank-items", "{tmp}/bank.txt"),
     ["--query-bank-items", "is a file", "--query-bank-texts"]),
    ("item bank: an empty store", _qb("--query-bank-items", "{tmp}/empty_store"),
     ["--query-bank-items", "{tmp}/empty_store", "holds no embeddings"]),
    ("item bank: another dimension", _qb("--query-bank-items", "{tmp}/wide_store"),
     ["--query-bank-items", "{tmp}/wide_store", "4-d", "'toy'", "3-d"]),
]

FILES = {
    "bank.txt": "a cat\na dog\n", "blank.txt": "\n  \n\n", "empty.jsonl": "",
    "mixed.jsonl": '"a cat"\n7\n', "odd.jsonl": '{"id": 1, "sentence": "a cat"}\n',
    "texts.jsonl": '{"text": "a cat"}\n{"text": "a dog"}\n{"id": 3}\n',
    "samples.jsonl": '{"id": "a", "caption": "a cat"}\n{"id": "b", "caption": ""}\n',
    "broken.jsonl": '"a cat"\n{"text": \n',
    "paragraphs.jsonl": '{"id": "a", "caption": "a cat", "paragraph": "A cat sits. It is grey."}\n',
    "samples_ok.jsonl": '{"id": "a", "caption": "a cat"}\n{"id": "b", "caption": "a dog"}\n',
    "mvc.jsonl": '{"id": "v", "video": "v.mp4", "O": "a cat", "D1*": "A grey cat sits on a mat."}\n',
    "bank_store": _store(3, 2), "empty_store": _store(3, 0), "wide_store": _store(4, 2),
}


@pytest.mark.parametrize("argv, where", [pytest.param(*row[1:], id=row[0]) for row in CASES])
def test_eval_renorm_refuses(argv, where, tmp_path, monkeypatch):
    places = {"tmp": str(tmp_path)}
    lines = "".join(json.dumps({"id": i, "texts": ts}) + "\n" for i, ts in TEXTS.items())
    write_files(tmp_path, {"bench.yaml": BENCH, "split.jsonl": lines, "store": _items,
                           "toy_renorm_catalogue.py": MODEL, **FILES}, places)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # an imported model module leaves no __pycache__
    before = tree(tmp_path)
    assert_refused([fill(a, places) for a in argv], *[fill(w, places) for w in where],
                   leaves=[tmp_path / "results"], cwd=tmp_path)
    assert tree(tmp_path) == before, "the folder changed"


def _items(path: Path, places: dict[str, str]) -> None:
    import torch

    from vlr_plugins.data import EmbeddingStoreWriter

    with EmbeddingStoreWriter(path, 3) as writer:
        writer.add(list(TEXTS), torch.eye(3))


def test_the_catalogue_covers_every_renorm_option():
    options = {a for row in CASES for a in row[1] if a.startswith("--")}
    assert {"--renorm", "--dsl-temperature", "--query-bank-texts", "--query-bank-fields", "--query-bank-items",
            "--qb-beta", "--qb-k"} <= options
