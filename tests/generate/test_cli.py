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


def test_vlr_train_reads_the_generated_corpus(tmp_path, monkeypatch, capsys, tiny_world, tiny_encoder_cfg):
    """The corpus goes to `vlr train paragraph/c5` unchanged: its preflight (every record
    read and checked, every id in the image store) passes, and an epoch runs."""
    pytest.importorskip("mmengine")
    from vlr_plugins.recipe import find_recipe

    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
    world = [json.loads(line) for line in open(tiny_world["train"], encoding="utf-8")]
    records = write_images(tmp_path / "images", [r["caption"] for r in world])
    for r, w in zip(records, world):
        r["id"] = w["id"]  # the image store's ids
    items = tmp_path / "images" / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    out = tmp_path / "corpus"
    with FakeOpenAI(ParagraphModels(glitches=False)) as server:
        assert main(["generate", "paragraph", "--input", str(items), "--out", str(out), "--set",
                     f"roles.captioner.base_url={server.url}", f"roles.judge.base_url={server.url}"]) == 0
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(f"_base_: {json.dumps(str(find_recipe('paragraph/c5')))}\nname: tiny\n"
                      f"model: {json.dumps(tiny_encoder_cfg)}\n"
                      "train: {batch_size: 16, epochs: 1, warmup_steps: 1, num_workers: 0}\n", encoding="utf-8")
    capsys.readouterr()
    code = main(["train", str(recipe), "--train", str(out / "corpus.jsonl"),
                 "--image-embeddings", tiny_world["image_embeddings"], "--work-dir", str(tmp_path / "work")])
    assert code == 0
    assert f"training tiny on {len(world)} samples" in capsys.readouterr().out


def test_a_run_with_failed_records_exits_1_naming_how_many(tmp_path, monkeypatch, capsys):
    """The corpus is complete and keeps the failures, and the exit status and one error line
    say it is not whole (it exited 0)."""
    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
    records = write_images(tmp_path / "images", ["a red bus", "two cats", "a kite"])  # the kite's lists fail
    items = tmp_path / "images" / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    out = tmp_path / "corpus"
    with FakeOpenAI(ParagraphModels(glitches=False)) as server:
        code = main(["generate", "paragraph", "--input", str(items), "--out", str(out), "--set",
                     f"roles.captioner.base_url={server.url}", f"roles.judge.base_url={server.url}"])
    shown = capsys.readouterr()
    assert code == 1, shown.err
    assert "complete: 3 records; failures: score-1/score 1, texts/positives 1" in shown.out
    errors = [line for line in shown.err.splitlines() if line.startswith("error:")]
    assert errors == [f"error: 1 of 3 records generated by this run have failed requests (the first: record 'r2', "
                      "stage texts, prompt positives: malformed answer after 3 tries: expected 5 captions, found 4); "
                      f"they are in the corpus with their failures (`vlr generate stats {out}` counts them)"]
    assert shown.err.splitlines()[-1] == errors[0]
    # a rerun has nothing to generate: nothing failed in it
    with FakeOpenAI(ParagraphModels(glitches=False)) as server:
        assert main(["generate", "paragraph", "--input", str(items), "--out", str(out), "--set",
                     f"roles.captioner.base_url={server.url}", f"roles.judge.base_url={server.url}"]) == 0


def test_failed_records_of_an_unfinished_corpus_are_pointed_to_in_its_stage_parts(tmp_path, monkeypatch, capsys):
    """`--stages texts` with a record whose lists fail: exit 1, and the error line names where the
    failures are (the stage parts), not `vlr generate stats`, which needs the finished corpus."""
    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
    records = write_images(tmp_path / "images", ["a red bus", "a kite"])  # the kite's lists fail
    items = tmp_path / "images" / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    out = tmp_path / "corpus"
    with FakeOpenAI(ParagraphModels(glitches=False)) as server:
        code = main(["generate", "paragraph", "--input", str(items), "--out", str(out), "--stages", "texts",
                     "--set", f"roles.captioner.base_url={server.url}", f"roles.judge.base_url={server.url}"])
    shown = capsys.readouterr()
    assert code == 1, shown.err
    assert "not complete" in shown.out and not (out / "manifest.json").exists()
    assert shown.err.splitlines()[-1].endswith(
        f"they are in the stage parts under {out / 'stages'} with their failures (`vlr generate stats` counts "
        "them once the corpus is complete)")
    part = [json.loads(line) for line in (out / "stages" / "texts" / "part-000000.jsonl").read_text().splitlines()]
    assert [r["id"] for r in part if r["failures"]] == ["r1"]


def test_torchrun_ranks_take_their_shards_and_merge_the_single_process_corpus(tmp_path, monkeypatch):
    """A real ``torchrun --standalone --nproc-per-node 2``, no shard options: rank ``r`` writes the
    parts ``k % 2 == r`` (worker r of 2), and the corpus, manifest and every part are the bytes
    one process writes."""
    import os
    import subprocess
    import sys

    pytest.importorskip("torch.distributed.run", reason="no torchrun (torch.distributed.run) in this torch")
    from _torchrun import cpu_env

    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
    records = write_images(tmp_path / "images", ["a red bus", "two cats", "a bowl of soup"])
    items = tmp_path / "images" / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")

    def argv(url, out):
        return ["generate", "paragraph", "--input", str(items), "--out", str(out), "--no-cache", "--set",
                f"roles.captioner.base_url={url}", f"roles.judge.base_url={url}", "records_per_part=1"]

    env = {k: v for k, v in cpu_env().items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    with FakeOpenAI(ParagraphModels(glitches=False)) as server:  # one server: the URL is in run.json, manifest
        assert main(argv(server.url, tmp_path / "single")) == 0
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                               "-m", "vlr_plugins.cli", *argv(server.url, tmp_path / "ranked")],
                              capture_output=True, text=True, env=env, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    single, ranked = tmp_path / "single", tmp_path / "ranked"
    assert sorted(p.name for p in (ranked / "progress").iterdir()) == ["worker-00000-of-00002.json",
                                                                       "worker-00001-of-00002.json"]
    assert json.loads((ranked / "progress" / "worker-00001-of-00002.json").read_text())["parts_owned"] == 1
    files = sorted(str(p.relative_to(single)) for p in single.rglob("*") if p.is_file() and "progress" not in p.parts)
    assert "corpus.jsonl" in files and "manifest.json" in files and len(files) > 8
    for name in files:
        assert (ranked / name).read_bytes() == (single / name).read_bytes(), name
    assert "complete: 3 records" in done.stdout

    # --merge-only writes the same corpus and manifest from the parts alone, asking no model
    for name in ("corpus.jsonl", "manifest.json"):
        (ranked / name).unlink()
    closed = "http://127.0.0.1:9/v1"  # endpoints are not part of the run: any may be given
    assert main(["generate", "paragraph", "--out", str(ranked), "--merge-only", "--input", str(items), "--set",
                 f"roles.captioner.base_url={closed}", f"roles.judge.base_url={closed}", "records_per_part=1"]) == 0
    for name in ("corpus.jsonl", "manifest.json"):
        assert (ranked / name).read_bytes() == (single / name).read_bytes(), name
