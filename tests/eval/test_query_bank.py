"""Query banks as `vlr eval --renorm qbnorm` reads them (each text format, written here by the
package's own writers where it has them), the sentence a report prints, and the text bank encoded
by the model at each benchmark's budget: once per budget, equal to QueryBankNorm called directly."""

from __future__ import annotations

import json

import pytest
import torch

from vlr_plugins.data import EmbeddingStoreWriter
from vlr_plugins.data.mvc_samples import MVCSample, write_mvc_samples
from vlr_plugins.data.sample import ParagraphSample, write_paragraph_samples
from vlr_plugins.eval import QueryBankNorm, evaluate_benchmarks, load_benchmark_specs, retrieval_recall
from vlr_plugins.eval.query_bank import QueryBanks, read_item_bank, read_text_bank, renorm_sentence


def test_each_text_format(tmp_path):
    (tmp_path / "a.txt").write_text("a cat\n\n  a dog on a mat \n")
    assert read_text_bank(tmp_path / "a.txt").texts == ("a cat", "a dog on a mat")
    (tmp_path / "s.jsonl").write_text('"a cat"\n\n"a dog"\n')
    assert read_text_bank(tmp_path / "s.jsonl").texts == ("a cat", "a dog")
    (tmp_path / "t.jsonl").write_text('{"text": "a cat", "id": 4}\n{"text": "a dog"}\n')
    assert read_text_bank(tmp_path / "t.jsonl").texts == ("a cat", "a dog")
    (tmp_path / "split.jsonl").write_text('{"id": "v1", "texts": ["a", "b"]}\n{"id": "v2", "texts": ["c"]}\n')
    bank = read_text_bank(tmp_path / "split.jsonl")
    assert bank.texts == ("a", "b", "c") and bank.format == "retrieval split"
    write_paragraph_samples([ParagraphSample("1", "a cat", positives=("a feline",), paragraph="A cat sits."),
                             ParagraphSample("2", "a dog")], tmp_path / "p.jsonl")
    bank = read_text_bank(tmp_path / "p.jsonl")
    assert bank.texts == ("a cat", "a dog") and bank.record() == {"path": str(tmp_path / "p.jsonl"),
                                                                  "format": "paragraph samples", "texts": 2}
    (tmp_path / "p.csv").write_text("caption,id\na cat,1\na dog,2\n")
    assert read_text_bank(tmp_path / "p.csv").texts == ("a cat", "a dog")
    write_mvc_samples([MVCSample("1", "v1.mp4", {"O": "web", "S2": "summary two", "D1": "long"}),
                       MVCSample("2", "v2.mp4", {"S1": "summary one"})], tmp_path / "m.jsonl")
    assert read_text_bank(tmp_path / "m.jsonl").texts == ("web", "summary two", "summary one")


def test_the_fields_of_sample_records_that_form_the_bank(tmp_path):
    write_paragraph_samples([ParagraphSample("1", "a cat", positives=("a feline", "a kitty"), paragraph="A cat sits."),
                             ParagraphSample("2", "a dog", paragraph="A dog runs. It is fast.")], tmp_path / "p.jsonl")
    bank = read_text_bank(tmp_path / "p.jsonl", fields=["paragraph"])
    assert bank.texts == ("A cat sits.", "A dog runs. It is fast.")
    assert bank.record()["format"] == "paragraph samples (paragraph)"
    # sample by sample, in the order given; a sample without the field adds nothing
    assert read_text_bank(tmp_path / "p.jsonl", fields=["positives", "caption"]).texts == (
        "a feline", "a kitty", "a cat", "a dog")
    (tmp_path / "p.csv").write_text("caption,id\na cat,1\na dog,2\n")
    assert read_text_bank(tmp_path / "p.csv", fields=["caption"]).texts == ("a cat", "a dog")
    write_mvc_samples([MVCSample("1", "v1.mp4", {"O": "web", "D1*": "refined one", "D2*": "refined two"}),
                       MVCSample("2", "v2.mp4", {"S1": "summary one", "D2*": "refined three"})], tmp_path / "m.jsonl")
    bank = read_text_bank(tmp_path / "m.jsonl", fields=["D1*", "D2*"])
    assert bank.texts == ("refined one", "refined two", "refined three")
    assert bank.format == "MVC samples (D1*, D2*)"


def test_an_item_bank_is_every_row_of_its_store(tmp_path):
    rows = torch.randn(5, 4)
    with EmbeddingStoreWriter(tmp_path / "bank", 4, shard_size=2) as writer:
        writer.add([f"t{i}" for i in range(5)], rows)
    bank = read_item_bank(tmp_path / "bank")
    assert torch.equal(bank.embeddings, rows) and bank.record() == {"path": str(tmp_path / "bank"), "items": 5,
                                                                    "dim": 4}


def test_the_sentence_a_report_prints():
    assert renorm_sentence(None) == ""
    assert renorm_sentence({"method": "dsl", "temperature": 100.0}) == \
        "Scores re-normalised with DSL (dual softmax, temperature 100)."
    record = {"method": "qbnorm", "beta": 20.0, "k": 1, "item_bank": {"path": "st", "items": 7, "dim": 3},
              "text_bank": {"path": "train.txt", "format": "text lines", "texts": 180000}}
    assert renorm_sentence(record) == ("Scores re-normalised with QB-Norm (beta 20, k 1; text-to-item bank: "
                                       "180,000 texts from train.txt; item-to-text bank: 7 items from st).")
    assert renorm_sentence({"method": "qbnorm", "beta": 5.0, "k": 2, "text_bank": 3, "item_bank": None}) == \
        "Scores re-normalised with QB-Norm (beta 5, k 2; text-to-item bank: 3 texts)."


class BudgetModel:
    """Embeds a text as its vector cut to ``max_tokens`` dimensions' worth of signal (so a budget
    changes the embedding) and records each call's budget."""

    embed_dim = 8

    def __init__(self, vectors):
        self.vectors, self.calls = vectors, []

    def encode_text(self, texts, max_tokens=None):
        self.calls.append((len(texts), max_tokens))
        rows = torch.tensor([self.vectors[t] for t in texts])
        return rows * torch.tensor([1.0 if d < max_tokens else 0.25 for d in range(rows.shape[1])])


def test_the_text_bank_is_encoded_at_each_benchmarks_budget(tmp_path):
    g = torch.Generator().manual_seed(5)
    items = torch.randn(6, 8, generator=g)
    texts = {f"t{j}": (items[j % 6] + torch.randn(8, generator=g)).tolist() for j in range(9)}
    bank = {f"b{j}": (items[j % 2] + 0.5 * torch.randn(8, generator=g)).tolist() for j in range(12)}
    owner = {f"t{j}": j % 6 for j in range(9)}
    lines = [{"id": f"v{i}", "texts": [t for t, o in owner.items() if o == i]} for i in range(6)]
    (tmp_path / "split.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    with EmbeddingStoreWriter(tmp_path / "store", 8) as writer:
        writer.add([f"v{i}" for i in range(6)], items)
    (tmp_path / "bench.yaml").write_text(
        "benchmarks:\n" + "".join(f"  - {{name: {n}, reader: retrieval_jsonl, path: split.jsonl, item_embeddings: "
                                  f"store, max_tokens: {b}}}\n" for n, b in (("short", 4), ("long", 7), ("again", 4))))
    (tmp_path / "bank.txt").write_text("\n".join(bank))
    model = BudgetModel({**texts, **bank})
    banks = QueryBanks(texts=read_text_bank(tmp_path / "bank.txt"), beta=6.0)
    out = evaluate_benchmarks(model, None, load_benchmark_specs(tmp_path / "bench.yaml"), renorm=banks,
                              progress=False)
    assert sorted(c for c in model.calls if c[0] == 12) == [(12, 4), (12, 7)]  # the bank once per budget
    ordered = [t for line in lines for t in line["texts"]]
    text_owner = torch.tensor([owner[t] for t in ordered])
    for name, budget in (("short", 4), ("long", 7), ("again", 4)):
        encoded = BudgetModel({**texts, **bank})
        expected = retrieval_recall(items, encoded.encode_text(ordered, budget), text_owner, renorm=QueryBankNorm(
            text_bank=encoded.encode_text(list(bank), budget), beta=6.0))
        record = expected.pop("renorm")
        assert out["recall"][name].pop("renorm") == record
        assert out["recall"][name] == pytest.approx(expected, abs=1e-12)
    assert out["renorm"] == banks.record()


def test_a_text_bank_holding_test_texts_is_warned_of(tmp_path):
    (tmp_path / "split.jsonl").write_text('{"id": "v0", "texts": ["a", "b"]}\n{"id": "v1", "texts": ["c"]}\n')
    with EmbeddingStoreWriter(tmp_path / "store", 2) as writer:
        writer.add(["v0", "v1"], torch.eye(2))
    (tmp_path / "bench.yaml").write_text("benchmarks:\n  - {name: toy, reader: retrieval_jsonl, path: split.jsonl, "
                                         "item_embeddings: store}\n")
    (tmp_path / "bank.txt").write_text("b\nz\nc\nb\n")
    vectors = {"a": [1.0, 0.1], "b": [0.9, 0.3], "c": [0.1, 1.0], "z": [0.5, 0.5]}

    class Model:
        def encode_text(self, texts):
            return torch.tensor([vectors[t] for t in texts])

    warned = []
    evaluate_benchmarks(Model(), None, load_benchmark_specs(tmp_path / "bench.yaml"), progress=False,
                        renorm=QueryBanks(texts=read_text_bank(tmp_path / "bank.txt")), on_warning=warned.append)
    assert len(warned) == 1 and warned[0].startswith("2 of the query bank's distinct texts") and "'toy'" in warned[0]


def shared_reference(bank_ids, bank_rows, test_ids, test_rows):
    """Bank rows whose id is a test id, or whose float32 values equal a test item's row."""
    return sum(1 for i, row in zip(bank_ids, bank_rows)
               if i in test_ids or any(torch.equal(row.float(), t.float()) for t in test_rows))


def test_an_item_bank_holding_test_items_is_warned_of(tmp_path):
    g = torch.Generator().manual_seed(0)
    items = torch.randn(3, 4, generator=g)
    items[2, 0] = 0.0
    lines = [{"id": f"v{i}", "texts": [f"t{i}"]} for i in range(3)]
    (tmp_path / "split.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    with EmbeddingStoreWriter(tmp_path / "store", 4) as writer:
        writer.add(["v0", "v1", "v2"], items)
    (tmp_path / "bench.yaml").write_text("benchmarks:\n  - {name: toy, reader: retrieval_jsonl, path: split.jsonl, "
                                         "item_embeddings: store}\n")
    # train0 is v2 under another id, v1 is a test id (re-encoded: another row), train1 is new; -0.0 equals 0.0
    bank_rows = torch.stack([items[2], torch.randn(4, generator=g), torch.randn(4, generator=g)])
    bank_rows[0, 0] = -0.0
    with EmbeddingStoreWriter(tmp_path / "bank", 4) as writer:
        writer.add(["train0", "v1", "train1"], bank_rows)
    with EmbeddingStoreWriter(tmp_path / "clean", 4) as writer:
        writer.add(["train1", "train2"], torch.randn(2, 4, generator=g))
    texts = {f"t{i}": items[i].tolist() for i in range(3)}

    class Model:
        def encode_text(self, texts_):
            return torch.tensor([texts[t] for t in texts_])

    specs = load_benchmark_specs(tmp_path / "bench.yaml")
    for bank, ids in (("bank", ["train0", "v1", "train1"]), ("clean", [])):
        warned = []
        out = evaluate_benchmarks(Model(), None, specs, progress=False, on_warning=warned.append,
                                  renorm=QueryBanks(items=read_item_bank(tmp_path / bank)))
        if not ids:
            assert warned == [] and "toy" in out["recall"]
            continue
        want = shared_reference(ids, read_item_bank(tmp_path / bank).embeddings, {"v0", "v1", "v2"}, items)
        assert want == 2
        assert len(warned) == 1 and warned[0].startswith(f"{want} of the item bank's 3 items") and "'toy'" in warned[0]
        assert "training items, not the test's" in warned[0]
        from vlr_plugins.data.embedding_store import EmbeddingStore

        for chunk in (1, 2):  # the test rows read a chunk at a time
            assert read_item_bank(tmp_path / bank).shared_with(["v0", "v1", "v2"], EmbeddingStore(tmp_path / "store"),
                                                               chunk=chunk) == want
