"""`vlr eval`: a trained checkpoint on benchmarks given as YAML, written as JSON, Markdown, plots."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("mmengine")
from vlr_plugins.cli import main  # noqa: E402


def write_benchmarks(tmp_path, tiny_world, extra=""):
    p = tmp_path / "benchmarks.yaml"
    p.write_text(
        "benchmarks:\n"
        f"  - {{name: short, reader: retrieval_jsonl, path: {tiny_world['eval_short']}, "
        f"item_embeddings: {tiny_world['image_embeddings']}}}\n"
        f"  - {{name: long, reader: retrieval_jsonl, path: {tiny_world['eval_long']}, "
        f"item_embeddings: {tiny_world['image_embeddings']}, max_tokens: 128}}\n" + extra)
    return p


def test_eval_reports_recall_equal_to_the_engine(tiny_checkpoint, tiny_world, tmp_path, capsys):
    from vlr_plugins.data import read_retrieval_jsonl
    from vlr_plugins.eval import evaluate_retrieval_set
    from vlr_plugins.specs import load_text_encoder

    out = tmp_path / "out"
    rc = main(["eval", "--model", str(tiny_checkpoint), "--benchmarks", str(write_benchmarks(tmp_path, tiny_world)),
               "--protocol", "none", "--budget", "short=20", "--out", str(out), "--label", "c5-tiny"])
    assert rc == 0
    report = json.loads((out / "results.json").read_text())
    assert report["budgets"] == {"short": 20, "long": 128} and report["label"] == "c5-tiny"
    encoder = load_text_encoder(tiny_checkpoint)
    tok = tiny_world["object"].tokenizer()
    for name, budget in (("short", 20), ("long", 128)):
        rs = read_retrieval_jsonl(tiny_world[f"eval_{name}"], name)
        direct = evaluate_retrieval_set(encoder, tok, rs, tiny_world["image_embeddings"], budget, progress=False)
        assert report["recall"][name] == pytest.approx(direct)
    assert "| c5-tiny |" in (out / "results.md").read_text()
    assert (out / "recall.png").read_bytes()[:4] == b"\x89PNG"
    assert "| c5-tiny |" in capsys.readouterr().out


def test_eval_without_a_budget_or_with_a_bad_file_exits_2(tiny_checkpoint, tiny_world, tmp_path, capsys):
    bench = write_benchmarks(tmp_path, tiny_world)
    assert main(["eval", "--model", str(tiny_checkpoint), "--benchmarks", str(bench), "--protocol", "none",
                 "--out", str(tmp_path / "o")]) == 2
    assert "benchmark 'short' has no token budget" in capsys.readouterr().err
    bad = write_benchmarks(tmp_path, tiny_world, extra="  - {name: x, reader: nope, path: a, item_embeddings: b}\n")
    assert main(["eval", "--model", str(tiny_checkpoint), "--benchmarks", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "benchmark 3" in err and "'reader'" in err and "unknown reader 'nope'" in err
    assert not (tmp_path / "o").exists()


def test_a_bug_in_the_engine_keeps_its_traceback(tiny_checkpoint, tiny_world, tmp_path, monkeypatch):
    import vlr_plugins.eval.evaluate as evaluate

    def engine_with_a_bug(*args, **kwargs):
        raise ValueError("a bug in the engine")

    monkeypatch.setattr(evaluate, "evaluate_retrieval_set", engine_with_a_bug)
    with pytest.raises(ValueError, match="a bug in the engine"):  # not turned into an `error:` line
        main(["eval", "--model", str(tiny_checkpoint), "--benchmarks", str(write_benchmarks(tmp_path, tiny_world)),
              "--protocol", "none", "--budget", "short=20", "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_the_truncation_sweep_computes_and_plots_the_chosen_metric(tiny_checkpoint, tiny_world, tmp_path):
    from vlr_plugins.data import EmbeddingStore, read_retrieval_jsonl
    from vlr_plugins.eval import truncation_sweep
    from vlr_plugins.specs import load_text_encoder

    out = tmp_path / "out"
    bench = tmp_path / "one.yaml"
    bench.write_text("benchmarks:\n"
                     f"  - {{name: short, reader: retrieval_jsonl, path: {tiny_world['eval_short']}, "
                     f"item_embeddings: {tiny_world['image_embeddings']}, max_tokens: 20}}\n")
    assert main(["eval", "--model", str(tiny_checkpoint), "--benchmarks", str(bench), "--protocol", "none",
                 "--metrics", "r@1,mnr", "--truncation", "8,20", "--truncation-metric", "mnr", "--out", str(out)]) == 0
    report = json.loads((out / "results.json").read_text())
    rs = read_retrieval_jsonl(tiny_world["eval_short"], "short")
    items = EmbeddingStore(tiny_world["image_embeddings"]).get(list(rs.item_ids))
    direct = truncation_sweep(load_text_encoder(tiny_checkpoint), tiny_world["object"].tokenizer(), items, rs,
                              (8, 20), ks=(1,), rank_metrics=("mnr",), progress=False)
    assert sorted(report["truncation"]["short"]) == ["20", "8"]
    for budget, result in direct.items():
        assert report["truncation"]["short"][str(budget)] == pytest.approx(result) and "t2i_mnr" in result
    assert report["metrics"] == ["r@1", "mnr"]
    assert (out / "truncation-short.png").read_bytes()[:4] == b"\x89PNG"


def test_the_truncation_sweep_re_normalises_every_budget(tiny_checkpoint, tiny_world, tmp_path):
    """--renorm with --truncation: each budget's numbers equal truncation_sweep with the same
    re-normalisation (DSL; QB-Norm with a text bank encoded at each budget), and differ from the raw."""
    from vlr_plugins.data import EmbeddingStore, read_retrieval_jsonl
    from vlr_plugins.eval import DualSoftmax, QueryBankNorm, encode_texts, truncation_sweep
    from vlr_plugins.specs import load_text_encoder

    bench = tmp_path / "one.yaml"
    bench.write_text("benchmarks:\n"
                     f"  - {{name: short, reader: retrieval_jsonl, path: {tiny_world['eval_short']}, "
                     f"item_embeddings: {tiny_world['image_embeddings']}, max_tokens: 20}}\n")
    bank_texts = [f"a photo of thing number {i} next to another thing" for i in range(12)]
    (tmp_path / "bank.txt").write_text("\n".join(bank_texts) + "\n")
    rs = read_retrieval_jsonl(tiny_world["eval_short"], "short")
    items = EmbeddingStore(tiny_world["image_embeddings"]).get(list(rs.item_ids))
    encoder, tokenizer = load_text_encoder(tiny_checkpoint), tiny_world["object"].tokenizer()

    def bank_at(budget):
        return QueryBankNorm(text_bank=encode_texts(encoder, tokenizer, bank_texts, budget, progress=False), beta=5.0)

    raw = truncation_sweep(encoder, tokenizer, items, rs, (8, 20), ks=(1,), rank_metrics=("mnr",), progress=False)
    runs = {"dsl": (["--renorm", "dsl", "--dsl-temperature", "20"], DualSoftmax(20.0)),
            "qbnorm": (["--renorm", "qbnorm", "--query-bank-texts", str(tmp_path / "bank.txt"), "--qb-beta", "5"],
                       bank_at)}
    for name, (options, renorm) in runs.items():
        out = tmp_path / f"out-{name}"
        assert main(["eval", "--model", str(tiny_checkpoint), "--benchmarks", str(bench), "--protocol", "none",
                     "--metrics", "r@1,mnr", "--truncation", "8,20", *options, "--out", str(out)]) == 0
        report = json.loads((out / "results.json").read_text())
        direct = truncation_sweep(encoder, tokenizer, items, rs, (8, 20), ks=(1,), rank_metrics=("mnr",),
                                  renorm=renorm, progress=False)
        for budget, result in direct.items():
            got = report["truncation"]["short"][str(budget)]
            assert got["renorm"]["method"] == name
            numbers = {k: v for k, v in result.items() if k != "renorm"}
            assert {k: got[k] for k in numbers} == pytest.approx(numbers)
        assert any(direct[b][k] != raw[b][k] for b in direct for k in raw[b]), f"{name} changed nothing"
        assert (out / "truncation-short.png").read_bytes()[:4] == b"\x89PNG"
