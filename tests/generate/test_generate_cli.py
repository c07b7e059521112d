"""`vlr generate PIPELINE --input --out` against the loopback server, then `vlr generate stats`."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("openai")

from _fake_openai import FakeOpenAI
from _scripted_models import ParagraphModels, write_images

from vlr_plugins.cli import main
from vlr_plugins.generate.audit import corpus_audit, format_audit


def test_generate_then_stats(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
    records = write_images(tmp_path / "images", ["a red bus", "two cats", "a bowl of soup"])
    items = tmp_path / "images" / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    out = tmp_path / "corpus"
    with FakeOpenAI(ParagraphModels()) as server:
        fast = [f"roles.{r}.{k}={v}" for r in ("captioner", "judge")
                for k, v in (("base_url", server.url), ("backoff", 0.01), ("max_backoff", 0.02))]
        code = main(["generate", "paragraph", "--input", str(items), "--out", str(out),
                     "--set", *fast, "records_per_part=2"])
    assert code == 0
    shown = capsys.readouterr()
    assert "complete: 3 records; failures: none" in shown.out and f"corpus: {out / 'corpus.jsonl'}" in shown.out
    assert "part 2/2" in shown.err and "records/s" in shown.err
    assert [json.loads(line)["id"] for line in (out / "corpus.jsonl").read_text().splitlines()] == ["r0", "r1", "r2"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["pipeline"]["name"] == "paragraph" and manifest["records"] == 3
    # the pipeline as run, --set included, is kept beside the corpus
    assert server.url in (out / "pipeline.yaml").read_text()

    code = main(["generate", "stats", str(out), "--plot", str(tmp_path / "audit.png"),
                 "--json", str(tmp_path / "audit.json")])
    assert code == 0
    printed = capsys.readouterr().out
    assert printed.startswith(format_audit(corpus_audit(out)))
    assert "3 records (paragraph corpus)" in printed and "regenerated: 2" in printed
    assert (tmp_path / "audit.png").stat().st_size > 0
    assert json.loads((tmp_path / "audit.json").read_text()) == corpus_audit(out)


def test_a_shard_reports_what_is_left(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
    records = write_images(tmp_path / "images", ["a red bus", "two cats", "a bowl of soup"])
    items = tmp_path / "images" / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with FakeOpenAI(ParagraphModels()) as server:
        code = main(["generate", "paragraph", "--input", str(items), "--out", str(tmp_path / "c"),
                     "--set", f"roles.captioner.base_url={server.url}", f"roles.judge.base_url={server.url}",
                     "records_per_part=1", "--shard-index", "1", "--shard-count", "2"])
    assert code == 0
    assert "not complete" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "c" / "stages" / "texts").iterdir()) == ["part-000001.jsonl"]
