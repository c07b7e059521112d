"""`vlr eval --renorm dsl|qbnorm`: the real command on a tiny benchmark (a retrieval_jsonl file, its
store, a module:callable text model and the query banks written here). Each results.json value
equals retrieval_recall called directly with the same DualSoftmax / QueryBankNorm on the same
embeddings (the engine itself is checked against the papers' formulas in test_renorm.py), and
differs from the raw scores' (so the option reaches the engine); the Markdown says the renorm."""

from __future__ import annotations

import json

import pytest
import torch

from vlr_plugins.cli import main
from vlr_plugins.eval import DualSoftmax, QueryBankNorm, retrieval_recall

N_ITEMS, DIM, N_BANK = 10, 6, 25
NAMES = ["r@1", "r@3", "mnr", "mrr@5"]


def problem():
    """10 items with 1-3 noisy texts each; a text bank and an item bank around a few hubs (the
    items QB-Norm normalises away)."""
    g = torch.Generator().manual_seed(11)
    items = torch.randn(N_ITEMS, DIM, generator=g)
    owner = torch.tensor([i for i in range(N_ITEMS) for _ in range(1 + (i * 5) % 3)])
    texts = items[owner] + 1.2 * torch.randn(len(owner), DIM, generator=g)
    hubs = items[[2, 7]].repeat(N_BANK // 2 + 1, 1)[:N_BANK]
    text_bank = hubs + 0.8 * torch.randn(N_BANK, DIM, generator=g)
    item_bank = torch.randn(N_BANK + 3, DIM, generator=g) + texts[[0, 4]].mean(0)
    return items, texts, owner, text_bank, item_bank


@pytest.fixture()
def world(tmp_path, monkeypatch):
    from vlr_plugins.data import EmbeddingStoreWriter

    items, texts, owner, text_bank, item_bank = problem()
    strings = [f"text {j}" for j in range(len(owner))]
    lines = [{"id": f"v{i}", "texts": [s for s, o in zip(strings, owner.tolist()) if o == i]} for i in range(N_ITEMS)]
    (tmp_path / "split.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    for name, rows in (("store", items), ("train_items", item_bank)):
        with EmbeddingStoreWriter(tmp_path / name, DIM) as writer:
            writer.add([f"{name}{i}" if name != "store" else f"v{i}" for i in range(len(rows))], rows)
    bank_strings = [f"training caption {b}" for b in range(N_BANK)]
    (tmp_path / "train_captions.txt").write_text("\n".join(bank_strings) + "\n\n")
    (tmp_path / "bench.yaml").write_text("benchmarks:\n  - {name: msrvtt, reader: retrieval_jsonl, "
                                         "path: split.jsonl, item_embeddings: store}\n")
    vectors = {s: row.tolist() for s, row in zip([*strings, *bank_strings], torch.cat([texts, text_bank]))}
    (tmp_path / "toy_renorm_model.py").write_text(
        f"import torch\n\nVECTORS = {json.dumps(vectors)}\n\n"
        "class Model:\n    def encode_text(self, texts):\n        return torch.tensor([VECTORS[t] for t in texts])\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.dont_write_bytecode", True)
    # the embeddings as the command sees them: the model's float32 rows, the store's rows
    return (items, torch.tensor([vectors[s] for s in strings]), owner,
            torch.tensor([vectors[s] for s in bank_strings]), item_bank)


def run(tmp_path, *more):
    assert main(["eval", "--model", "toy_renorm_model:Model", "--benchmarks", "bench.yaml", "--protocol", "none",
                 "--metrics", ",".join(NAMES), "--out", "out", *more]) == 0
    return json.loads((tmp_path / "out" / "results.json").read_text()), (tmp_path / "out" / "results.md").read_text()


def direct(items, texts, owner, renorm=None):
    got = retrieval_recall(items, texts, owner, ks=(1, 3), rank_metrics=("mnr", "mrr@5"), renorm=renorm)
    return {k: v for k, v in got.items() if k != "renorm"}, got.get("renorm")


def assert_same(got: dict, expected: dict, raw: dict) -> None:
    assert {k: got[k] for k in expected} == pytest.approx(expected, abs=1e-12)
    assert any(abs(expected[k] - raw[k]) > 1e-9 for k in expected), "the renorm changed nothing: a weak test"


def test_dsl_equals_the_engine_called_directly(world, tmp_path):
    items, texts, owner, _, _ = world
    raw, _ = direct(items, texts, owner)
    for more, temperature in (((), 100.0), (("--dsl-temperature", "5"), 5.0)):
        report, md = run(tmp_path, "--renorm", "dsl", *more)
        expected, record = direct(items, texts, owner, DualSoftmax(temperature))
        got = report["recall"]["msrvtt"]
        assert_same(got, expected, raw)
        assert got["renorm"] == record == {"method": "dsl", "temperature": temperature}
        assert report["renorm"] == record
        assert f"Scores re-normalised with DSL (dual softmax, temperature {temperature:g})." in md


def test_qbnorm_with_a_text_bank_and_an_item_bank(world, tmp_path):
    items, texts, owner, text_bank, item_bank = world
    raw, _ = direct(items, texts, owner)
    report, md = run(tmp_path, "--renorm", "qbnorm", "--query-bank-texts", "train_captions.txt", "--qb-beta", "7")
    expected, record = direct(items, texts, owner, QueryBankNorm(text_bank=text_bank, beta=7.0))
    assert_same(report["recall"]["msrvtt"], expected, raw)
    assert report["recall"]["msrvtt"]["renorm"] == record == {"method": "qbnorm", "beta": 7.0, "k": 1,
                                                              "text_bank": N_BANK, "item_bank": None}
    assert report["renorm"] == {"method": "qbnorm", "beta": 7.0, "k": 1, "item_bank": None,
                                "text_bank": {"path": "train_captions.txt", "format": "text lines", "texts": N_BANK}}
    assert (f"Scores re-normalised with QB-Norm (beta 7, k 1; text-to-item bank: {N_BANK} texts from "
            "train_captions.txt).") in md

    report, md = run(tmp_path, "--renorm", "qbnorm", "--query-bank-items", "train_items", "--qb-beta", "9",
                     "--qb-k", "2")
    expected, record = direct(items, texts, owner, QueryBankNorm(item_bank=item_bank, beta=9.0, k=2))
    assert_same(report["recall"]["msrvtt"], expected, raw)
    assert report["recall"]["msrvtt"]["renorm"] == record
    assert report["renorm"]["item_bank"] == {"path": "train_items", "items": N_BANK + 3, "dim": DIM}
    assert f"item-to-text bank: {N_BANK + 3} items from train_items" in md

    report, _ = run(tmp_path, "--renorm", "qbnorm", "--query-bank-texts", "train_captions.txt",
                    "--query-bank-items", "train_items")
    expected, _ = direct(items, texts, owner, QueryBankNorm(text_bank=text_bank, item_bank=item_bank))
    assert_same(report["recall"]["msrvtt"], expected, raw)


def test_a_paper_table_says_the_renorm_and_a_run_without_is_unchanged(world, tmp_path):
    items, texts, owner, _, _ = world
    report, md = run(tmp_path, "--metrics", "r@1,r@5,r@10,mdr,mnr", "--tables", "clip4clip-msrvtt",
                     "--renorm", "dsl")
    assert report["tables"]["clip4clip-msrvtt"]["renorm"] == {"method": "dsl", "temperature": 100.0}
    table = md[md.index("**"):]  # the paper's table, after the recall table
    assert "Scores re-normalised with DSL (dual softmax, temperature 100)." in table
    report, md = run(tmp_path, "--tables", "clip4clip-msrvtt", "--metrics", "r@1,r@5,r@10,mdr,mnr")
    assert "renorm" not in report and "renorm" not in report["recall"]["msrvtt"]
    assert "renorm" not in report["tables"]["clip4clip-msrvtt"] and "re-normalised" not in md
    expected, _ = direct(items, texts, owner)
    assert report["recall"]["msrvtt"]["t2i_mnr"] == pytest.approx(expected["t2i_mnr"], abs=1e-12)
