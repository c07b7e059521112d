"""The benchmarks file of `vlr eval`, checked whole; and evaluate_benchmarks checking every benchmark before it encodes."""

from __future__ import annotations

import json
import re

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from vlr_plugins.data import EmbeddingStoreWriter  # noqa: E402
from vlr_plugins.data.retrieval_set import read_retrieval_jsonl  # noqa: E402
from vlr_plugins.errors import (  # noqa: E402
    ConfigError,
    DataFormatError,
    MissingEmbeddingsError,
    MissingFileError,
)
from vlr_plugins.eval import (  # noqa: E402
    BenchmarkSpec,
    evaluate_benchmarks,
    evaluate_retrieval_set,
    load_benchmark_specs,
    read_benchmark,
)
from vlr_plugins.text import BlipTextEncoder, build_wordpiece_tokenizer, words_of  # noqa: E402

ITEMS = {"img-a": ["a dog runs", "a brown dog"], "img-b": ["two cats sleep"], "img-c": ["a red car", "a car"]}
DIM = 16


@pytest.fixture(scope="module")
def tok():
    return build_wordpiece_tokenizer(words_of([t for ts in ITEMS.values() for t in ts]), model_max_length=32)


@pytest.fixture(scope="module")
def encoder(tok):
    torch.manual_seed(0)
    return BlipTextEncoder(config=dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1,
                                       num_attention_heads=2, intermediate_size=64, max_position_embeddings=32,
                                       pad_token_id=tok.pad_token_id, bos_token_id=tok.cls_token_id,
                                       sep_token_id=tok.sep_token_id), embed_dim=DIM).eval()


def _split(path, items=ITEMS):
    path.write_text("".join(json.dumps({"id": i, "texts": t}) + "\n" for i, t in items.items()))
    return path


def _store(path, ids=tuple(ITEMS), dim=DIM):
    with EmbeddingStoreWriter(path, dim) as writer:
        writer.add(list(ids), torch.nn.functional.normalize(torch.randn(len(ids), dim), dim=-1))
    return path


@pytest.fixture
def files(tmp_path):
    _split(tmp_path / "split.jsonl")
    _store(tmp_path / "stores" / "split")
    return tmp_path


def _yaml(tmp_path, *entries, name="bench.yaml"):
    path = tmp_path / name
    path.write_text("benchmarks:\n" + "".join(f"  - {json.dumps(e)}\n" for e in entries))
    return path


GOOD = {"name": "split", "reader": "retrieval_jsonl", "path": "split.jsonl", "item_embeddings": "stores/split"}


def test_specs_resolve_paths_and_keep_where_they_were_written(files):
    path = _yaml(files, GOOD, {**GOOD, "name": "short", "max_tokens": 8, "args": {"name": "s"}})
    specs = load_benchmark_specs(path)
    assert specs == [
        BenchmarkSpec("split", "retrieval_jsonl", str(files / "split.jsonl"), str(files / "stores/split")),
        BenchmarkSpec("short", "retrieval_jsonl", str(files / "split.jsonl"), str(files / "stores/split"),
                      args={"name": "s"}, max_tokens=8),
    ]
    assert [s.source for s in specs] == [f"{path}, benchmark 1", f"{path}, benchmark 2"]
    assert specs[1].where("max_tokens") == f"{path}, benchmark 2, field 'max_tokens'"
    [rs] = read_benchmark(specs[1])
    assert rs.name == "s" and rs.item_ids == tuple(ITEMS)


@pytest.mark.parametrize("entry, benchmark, field, problem", [
    ({**GOOD, "max_token": 8}, 1, "max_token", "unknown key"),
    ({**GOOD, "reader": "flickr"}, 1, "reader", "unknown reader 'flickr'"),
    ({**GOOD, "reader": "paragraph_samples"}, 1, "reader", "does not read a retrieval benchmark"),
    ({**GOOD, "args": {"split": "test"}}, 1, "args.split", "takes no argument 'split'; it takes: name"),
    ({**GOOD, "args": ["test"]}, 1, "args", "expected a mapping"),
    ({**GOOD, "path": ""}, 1, "path", "missing"),
    ({**GOOD, "path": "nowhere.jsonl"}, 1, "path", "nowhere.jsonl is not there"),
    ({**GOOD, "path": "stores"}, 1, "path", "is a folder"),
    ({**GOOD, "item_embeddings": "stores"}, 1, "item_embeddings", "no embedding store"),
    ({**GOOD, "max_tokens": 2}, 1, "max_tokens", "an integer >= 3"),
    ({**GOOD, "max_tokens": True}, 1, "max_tokens", "an integer >= 3"),
    ({**GOOD, "text_kinds": "general"}, 1, "text_kinds", "a list of distinct text kinds"),
    ({k: v for k, v in GOOD.items() if k != "reader"}, 1, "reader", "missing"),
])
def test_each_bad_entry_is_named_by_benchmark_and_key(files, entry, benchmark, field, problem):
    path = _yaml(files, entry)
    with pytest.raises(DataFormatError, match=re.escape(problem)) as info:
        load_benchmark_specs(path)
    err = info.value
    assert (err.path, err.record, err.record_kind, err.field) == (str(path), benchmark, "benchmark", field)


def test_the_file_itself(files):
    with pytest.raises(MissingFileError, match="benchmarks file .*absent.yaml is not there"):
        load_benchmark_specs(files / "absent.yaml")
    (files / "bad.yaml").write_text("benchmarks:\n  - {name: a}\n  - {name: b]\n")
    with pytest.raises(DataFormatError, match="not valid YAML") as info:
        load_benchmark_specs(files / "bad.yaml")
    assert info.value.record == 3
    for text, found in (("", "an empty file"), ("- a\n", "a list at the top level"),
                        ("benchmarks: []\n", "an empty list"), ("benchmarks: {a: 1}\n", "found dict")):
        (files / "b.yaml").write_text(text)
        with pytest.raises(DataFormatError, match=re.escape(found)):
            load_benchmark_specs(files / "b.yaml")
    path = _yaml(files, GOOD, GOOD)
    with pytest.raises(DataFormatError, match="duplicate name 'split', first used by benchmark 1") as info:
        load_benchmark_specs(path)
    assert (info.value.record, info.value.field) == (2, "name")


def test_read_benchmark_names_the_spec_for_argument_values_and_text_kinds(files):
    (files / "shot2story.json").write_text("[]")
    path = _yaml(files, {**GOOD, "reader": "shot2story", "path": "shot2story.json", "args": {"level": "scene"}},
                 {**GOOD, "name": "kinds", "text_kinds": ["spatial"]})
    bad_level, bad_kinds = load_benchmark_specs(path)
    with pytest.raises(ConfigError, match=re.escape(f"{path}, benchmark 1, field 'args': level must be one of")):
        read_benchmark(bad_level)
    with pytest.raises(ConfigError, match=re.escape(f"{path}, benchmark 2, field 'text_kinds'") + ".*'spatial'"):
        read_benchmark(bad_kinds)


class CountingEncoder(torch.nn.Module):
    """The encoder under evaluation, counting its forward passes."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.calls = inner, 0
        self.embed_dim, self.max_positions = inner.embed_dim, inner.max_positions

    def forward(self, input_ids, attention_mask):
        self.calls += 1
        return self.inner(input_ids, attention_mask)


@pytest.mark.parametrize("second, error, problem", [
    ({"item_embeddings": "stores/partial"}, MissingEmbeddingsError, "1 id has no embedding"),
    ({"item_embeddings": "stores/wide"}, ConfigError, "holds 24-d embeddings, but the text encoder embeds texts in 16-d"),
    ({"max_tokens": 64}, ConfigError, "field 'max_tokens': 64 tokens exceed the text encoder's 32 positions"),
    ({"max_tokens": None}, ConfigError, "benchmark 'second' has no token budget"),
    ({"path": "broken.jsonl"}, DataFormatError, "broken.jsonl, line 1"),
])
def test_every_benchmark_is_checked_before_the_first_text_is_encoded(files, encoder, tok, second, error, problem):
    _store(files / "stores" / "partial", ids=["img-a", "img-b"])
    _store(files / "stores" / "wide", dim=24)
    (files / "broken.jsonl").write_text('{"id": "img-a", "texts": "a dog"}\n')
    entry = {**GOOD, "name": "second", "max_tokens": 16, **second}
    specs = load_benchmark_specs(_yaml(files, {**GOOD, "max_tokens": 16},
                                       {k: v for k, v in entry.items() if v is not None}))
    counting = CountingEncoder(encoder)
    with pytest.raises(error, match=re.escape(problem)):
        evaluate_benchmarks(counting, tok, specs, progress=False)
    assert counting.calls == 0


def test_truncation_budgets_are_checked_first(files, encoder, tok):
    specs = load_benchmark_specs(_yaml(files, {**GOOD, "max_tokens": 16}))
    counting = CountingEncoder(encoder)
    for sweep, problem in (([8, 8], "repeat"), ([2, 8], ">= 3"), ([8, 40], "40 exceeds the text encoder's 32")):
        with pytest.raises(ConfigError, match=re.escape(problem)):
            evaluate_benchmarks(counting, tok, specs, truncation=sweep, progress=False)
    assert counting.calls == 0


def test_results_equal_each_benchmark_evaluated_on_its_own(files, encoder, tok):
    specs = load_benchmark_specs(_yaml(files, {**GOOD, "max_tokens": 16}, {**GOOD, "name": "short"}))
    got = evaluate_benchmarks(encoder, tok, specs, budgets={"short": 4}, progress=False)
    rs = read_retrieval_jsonl(files / "split.jsonl")
    assert got["budgets"] == {"split": 16, "short": 4}
    for name, budget in got["budgets"].items():
        assert got["recall"][name] == evaluate_retrieval_set(encoder, tok, rs, str(files / "stores/split"), budget,
                                                             progress=False)
