"""A local Ray run of the paragraph pipeline on the loopback server writes the records a
single-process run writes, byte for byte; a Ray run finishes a corpus another run began."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("openai")
ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

from _fake_openai import FakeOpenAI
from _scripted_models import ParagraphModels, write_images

from vlr_plugins.generate.pipeline import load_pipeline
from vlr_plugins.generate.ray_runner import generate_corpus_ray
from vlr_plugins.generate.runner import generate_corpus

CAPTIONS = ["a red bus", "two cats", "a bowl of soup", "a kite", "a boat"]


@pytest.fixture(scope="module")
def local_ray():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", "EMPTY")  # the workers this ray.init starts inherit it (keys travel no other way)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        yield
        ray.shutdown()


def test_ray_gives_the_single_process_corpus(tmp_path, local_ray):
    records = write_images(tmp_path / "images", CAPTIONS)
    items = tmp_path / "images" / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")

    def pipeline(url):
        role = {"base_url": url, "backoff": 0.01, "max_backoff": 0.02}
        return load_pipeline("paragraph", {"roles": {"captioner": role, "judge": role}, "records_per_part": 2})

    with FakeOpenAI(ParagraphModels(glitches=False)) as server:
        generate_corpus(pipeline(server.url), items, tmp_path / "single")
    lines: list[str] = []
    with FakeOpenAI(ParagraphModels(glitches=False)) as server:
        # one part first without Ray, as a stopped run would leave it; Ray does the rest
        generate_corpus(pipeline(server.url), items, tmp_path / "ray", shard_index=0, shard_count=3)
        result = generate_corpus_ray(pipeline(server.url), items, tmp_path / "ray", workers=2, report=lines.append)
    assert result["complete"] and result["parts_run"] == 2 and result["workers"] == 2
    assert len(lines) == 2 and "records/s over 2 workers" in lines[-1]
    single, spread = (tmp_path / "single" / "corpus.jsonl").read_bytes(), (tmp_path / "ray" / "corpus.jsonl").read_bytes()
    assert spread == single
    ids = [json.loads(line)["id"] for line in spread.splitlines()]
    assert len(ids) == len(set(ids)) == len(CAPTIONS)


def test_vlr_generate_engine_ray(tmp_path, local_ray, capsys):
    from vlr_plugins.cli import main

    records = write_images(tmp_path / "images", CAPTIONS[:3])
    items = tmp_path / "images" / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with FakeOpenAI(ParagraphModels(glitches=False)) as server:
        code = main(["generate", "paragraph", "--engine", "ray", "--ray-workers", "2", "--input", str(items),
                     "--out", str(tmp_path / "out"), "--set", f"roles.captioner.base_url={server.url}",
                     f"roles.judge.base_url={server.url}", "records_per_part=2"])
    assert code == 0
    shown = capsys.readouterr()
    assert "complete: 3 records" in shown.out and "records/s over 2 workers" in shown.err
