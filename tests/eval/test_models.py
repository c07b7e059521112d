"""The text models `vlr eval` scores: the encode_text protocol (batches, the keywords a model
takes, its output checked), module:callable models, the protocol's text view, and re-ranking by
a matching head against a plain reference."""

from __future__ import annotations

import json

import pytest
import torch
from _reference import gallery_order, random_problem, score_matrix

from vlr_plugins.errors import ConfigError, UsageError
from vlr_plugins.eval import encode_with_model, match_reranker, retrieval_recall
from vlr_plugins.specs import load_text_model
from vlr_plugins.eval.models import TextModel, text_model_dim
from vlr_plugins.specs import text_model_source


class Recorder:
    """Embeds a text as (its length, its word count, 1); records every call's options."""

    embed_dim = 3

    def __init__(self):
        self.calls = []

    def encode_text(self, texts, view=None):
        self.calls.append((len(texts), view))
        return torch.tensor([[len(t), len(t.split()), 1.0] for t in texts])


def test_what_a_model_spec_names():
    assert text_model_source("open_clip:ViT-B-32:openai") == "open_clip"
    assert text_model_source("blip:Salesforce/blip-itm-base-coco") == "checkpoint"
    assert text_model_source("my_models:make_clip") == "python"
    assert text_model_source("pkg.sub:Factory.build") == "python"
    assert text_model_source("work_dirs/c5/epoch_10.pth") == "checkpoint"
    # a folder name alone would read as module:attr; the prefix decides first
    assert text_model_source("mllm:care7b:care") == "mllm"
    assert text_model_source("mllm:/models/CaRe-7B") == "mllm"
    assert isinstance(Recorder(), TextModel)


def test_texts_are_encoded_in_batches_with_the_keywords_the_model_takes():
    model = Recorder()
    texts = [f"text {'word ' * i}" for i in range(7)]
    emb = encode_with_model(model, texts, max_tokens=20, view="detailed", batch_size=3, progress=False)
    assert emb.dtype == torch.float32 and emb.shape == (7, 3)
    assert emb[:, 0].tolist() == [len(t) for t in texts]  # rows in input order
    # batches of 3; `view` is passed since encode_text names it, `max_tokens` is not
    assert model.calls == [(3, "detailed"), (3, "detailed"), (1, "detailed")]
    assert text_model_dim(model) == 3


class Returns:
    def __init__(self, out):
        self.out = out

    def encode_text(self, texts):
        return self.out(texts)


@pytest.mark.parametrize("out, message", [
    (lambda texts: torch.zeros(len(texts)), r"returned shape \(2,\) for 2 texts; expected \(2, D\)"),
    (lambda texts: torch.zeros(1, 4), r"returned shape \(1, 4\) for 2 texts"),
    (lambda texts: torch.full((len(texts), 4), float("nan")), "not finite"),
    (lambda texts: "embeddings", "returned a str"),
])
def test_what_encode_text_returns_is_checked(out, message):
    with pytest.raises(ConfigError, match=message):
        encode_with_model(Returns(out), ["a", "b"], progress=False)


def test_without_embed_dim_one_text_tells_the_width():
    assert text_model_dim(Returns(lambda texts: torch.ones(len(texts), 5))) == 5


MODULE = """
import torch

class Counter:
    def encode_text(self, texts):
        return torch.tensor([[float(len(t)), 1.0] for t in texts])

counter = Counter()

def make():
    return Counter()

NOT_A_MODEL = 3
"""


@pytest.mark.parametrize("attr", ["Counter", "counter", "make"])
def test_a_module_callable_gives_a_class_an_instance_or_a_factory(attr, tmp_path, monkeypatch):
    (tmp_path / "toy_counter_models.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.dont_write_bytecode", True)
    model = load_text_model(f"toy_counter_models:{attr}")
    assert encode_with_model(model, ["ab", "abcd"], progress=False).tolist() == [[2.0, 1.0], [4.0, 1.0]]


@pytest.mark.parametrize("spec, message", [
    ("toy_counter_models:Missing", "has no 'Missing'"),
    ("toy_counter_models:NOT_A_MODEL", "gives a int, which has no encode_text"),
    ("toy_absent_models:Counter", "cannot import 'toy_absent_models'"),
])
def test_a_module_callable_that_is_no_model_is_refused(spec, message, tmp_path, monkeypatch):
    (tmp_path / "toy_counter_models.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.dont_write_bytecode", True)
    with pytest.raises(UsageError, match=message) as e:
        load_text_model(spec)
    assert str(e.value).startswith("--model: ")


# --------------------------------------------------------------------------- re-ranking


def reranked_reference(items, texts, owner, head, k):
    """Ranks after re-ranking, written out: each query's gallery by cosine (ties: lower index
    first), its top k re-sorted by ``head(item, text)`` (ties keep their order); a query
    without a positive in its top k keeps its first rank."""
    S, owner = score_matrix(items, texts), owner.tolist()

    def rank(order, is_pos, pair):
        first = next(p for p, g in enumerate(order) if is_pos(g))
        if first >= k:
            return first
        top = order[:k]
        scores = [head(*pair(g)) for g in top]
        reordered = [top[p] for p in sorted(range(len(top)), key=lambda p: -scores[p])]
        return next(p for p, g in enumerate(reordered) if is_pos(g))

    i2t = [rank(gallery_order(S[i]), lambda j, i=i: owner[j] == i, lambda j, i=i: (i, j)) for i in range(len(items))]
    t2i = [rank(gallery_order(S[:, j]), lambda i, j=j: i == owner[j], lambda i, j=j: (i, j))
           for j in range(len(texts))]
    return i2t, t2i


class MatchingHead:
    """A matching head whose scores are known: minus the distance between the item's first
    coordinate and a number given to each text."""

    def __init__(self, text_value):
        self.text_value = text_value

    def match_scores(self, item_ids, item_emb, texts):
        assert len(item_ids) == len(item_emb) == len(texts)
        return -(item_emb[:, 0] - torch.tensor([self.text_value[t] for t in texts])).abs()


def test_reranked_recall_equals_the_reference():
    items, text_emb, owner = random_problem(n_items=30, dim=8, seed=3)
    texts = [f"text {j}" for j in range(len(owner))]
    values = torch.randn(len(texts), generator=torch.Generator().manual_seed(1)).tolist()
    head = MatchingHead(dict(zip(texts, values)))
    item_ids = [f"v{i}" for i in range(len(items))]
    for k in (1, 4, 16):
        got = retrieval_recall(items, text_emb, owner, rerank=match_reranker(head, item_ids, texts, items),
                               rerank_k=k, rerank_batch=7, return_ranks=True)
        i2t, t2i = reranked_reference(items, text_emb, owner, lambda i, j: -abs(items[i, 0] - values[j]), k)
        assert got["i2t_ranks"].tolist() == i2t and got["t2i_ranks"].tolist() == t2i


def test_a_matching_head_that_returns_the_wrong_shape_is_refused():
    items, text_emb, owner = random_problem(n_items=6, dim=4)
    texts = [str(j) for j in range(len(owner))]

    class Bad:
        def match_scores(self, item_ids, item_emb, texts):
            return torch.zeros(len(texts) + 1)

    with pytest.raises(ConfigError, match="Bad.match_scores returned shape"):
        retrieval_recall(items, text_emb, owner, rerank=match_reranker(Bad(), list("abcdef"), texts, items), rerank_k=2)


def write_problem(tmp_path, items, text_emb, owner):
    """A retrieval_jsonl benchmark, its store and a module:callable model with a known matching head."""
    from vlr_plugins.data import EmbeddingStoreWriter

    texts = [f"text {j}" for j in range(len(owner))]
    lines = [{"id": f"v{i}", "texts": [t for t, o in zip(texts, owner.tolist()) if o == i]} for i in range(len(items))]
    (tmp_path / "split.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    with EmbeddingStoreWriter(tmp_path / "store", items.shape[1]) as writer:
        writer.add([f"v{i}" for i in range(len(items))], items)
    (tmp_path / "bench.yaml").write_text("benchmarks:\n  - {name: toy, reader: retrieval_jsonl, path: split.jsonl, "
                                         "item_embeddings: store}\n")
    vectors = {line_text: row.tolist() for line in lines for line_text in line["texts"]
               for row in [text_emb[texts.index(line_text)]]}
    values = {t: float(j % 5) / 4 - 0.5 for j, t in enumerate(texts)}
    (tmp_path / "toy_matching_model.py").write_text(
        "import torch\n\n"
        f"VECTORS = {json.dumps(vectors)}\nVALUES = {json.dumps(values)}\n\n"
        "class Model:\n"
        "    def encode_text(self, texts):\n"
        "        return torch.tensor([VECTORS[t] for t in texts])\n\n"
        "    def match_scores(self, item_ids, item_emb, texts):\n"
        "        return -(item_emb[:, 0] - torch.tensor([VALUES[t] for t in texts])).abs()\n")
    return texts, values


def test_vlr_eval_reranks_with_the_model_s_matching_head(tmp_path, monkeypatch):
    from vlr_plugins.cli import main

    items, text_emb, owner = random_problem(n_items=20, dim=6, seed=5)
    texts, values = write_problem(tmp_path, items, text_emb, owner)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.dont_write_bytecode", True)
    assert main(["eval", "--model", "toy_matching_model:Model", "--benchmarks", "bench.yaml", "--protocol", "none",
                 "--rerank-k", "3", "--out", "out"]) == 0
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    # the benchmark file lists texts item by item: the reference follows that order
    order = sorted(range(len(owner)), key=lambda j: (int(owner[j]), j))
    i2t, t2i = reranked_reference(items, text_emb[order], owner[order],
                                  lambda i, j: -abs(items[i, 0] - values[texts[order[j]]]), 3)
    assert report["rerank_k"] == 3 and report["budgets"] == {"toy": None}
    for direction, ranks in (("i2t", i2t), ("t2i", t2i)):
        for k in (1, 5, 10):
            assert report["recall"]["toy"][f"{direction}_r{k}"] == pytest.approx(
                100 * sum(r < k for r in ranks) / len(ranks))


# --------------------------------------------------------------------------- protocol options


def test_the_protocol_s_text_view_reaches_a_model_that_takes_one(tmp_path):
    from vlr_plugins.data import EmbeddingStoreWriter
    from vlr_plugins.eval import evaluate_benchmarks, load_benchmark_specs

    (tmp_path / "split.jsonl").write_text('{"id": "a", "texts": ["a dog"]}\n{"id": "b", "texts": ["two red cars"]}\n')
    for name, meta in (("msrvtt", {"frames": 16, "sampler": "middle"}), ("didemo", {})):
        with EmbeddingStoreWriter(tmp_path / name, 3, meta=meta) as writer:
            writer.add(["a", "b"], torch.tensor([[5.0, 2.0, 1.0], [12.0, 3.0, 1.0]]))
    (tmp_path / "b.yaml").write_text(
        "benchmarks:\n"
        "  - {name: msrvtt, reader: retrieval_jsonl, path: split.jsonl, item_embeddings: msrvtt}\n"
        "  - {name: didemo, reader: retrieval_jsonl, path: split.jsonl, item_embeddings: didemo}\n")
    model, warned = Recorder(), []
    out = evaluate_benchmarks(model, None, load_benchmark_specs(tmp_path / "b.yaml"),
                              protocol="multi-view-captions/zero-shot", progress=False, on_warning=warned.append)
    assert model.calls == [(2, "summary"), (2, "detailed")]
    assert out["text_views"] == {"msrvtt": "summary", "didemo": "detailed"}
    assert out["budgets"] == {"msrvtt": None, "didemo": None}
    assert out["sampling"]["didemo"] == {"frames": 16, "sampler": "middle"}
    assert len(warned) == 1 and "benchmark 2" in warned[0] and "does not record its frames" in warned[0]
    # a budget for a model whose encode_text takes none, and re-ranking without a head, are refused
    specs = load_benchmark_specs(tmp_path / "b.yaml")
    with pytest.raises(ConfigError, match="a token budget is given, but Recorder.encode_text takes no max_tokens"):
        evaluate_benchmarks(model, None, specs, budgets={"msrvtt": 32}, progress=False)
    with pytest.raises(ConfigError, match="Recorder has no match_scores"):
        evaluate_benchmarks(model, None, specs, rerank_k=16, progress=False)


def test_a_model_dtype_is_for_mllm_specs_only():
    with pytest.raises(UsageError, match="--model: 'my_models:Tiny': a model dtype .bfloat16. is chosen for mllm: "
                                         "specs only"):
        load_text_model("my_models:Tiny", dtype="bfloat16")
