"""docs/care.md's "Trying it on a CPU, offline" runs as written: its files are saved and its
``care-offline`` shell block runs verbatim in a fresh folder, in a subprocess, with
HF_HUB_OFFLINE=1 (nothing may be downloaded); then what each step wrote is there and is what
the next step read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _doc_route import route_blocks, run_verbatim

pytest.importorskip("mmengine")
pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("av")

DOC = Path(__file__).resolve().parents[2] / "docs" / "care.md"


def blocks() -> tuple[dict[str, str], str]:
    return route_blocks(DOC, "care-offline")


def test_the_route_has_every_step():
    files, route = blocks()
    assert {"care-bench.yaml", "nli.csv"} <= set(files)
    for step in ("python -m vlr_plugins.mllm.tiny", "vlr precompute", "vlr eval --model mllm:", "vlr lens",
                 "vlr caption", "vlr train care/stage2"):
        assert step in route, step


def test_the_care_route_runs_verbatim_offline(tmp_path):
    files, route = blocks()
    work = tmp_path / "work"
    work.mkdir()
    for name, text in files.items():
        (work / name).write_text(text)
    out = run_verbatim(route, work, tmp_path, OMP_NUM_THREADS="1")
    shown = f"\nstdout:\n{out.stdout[-6000:]}\nstderr:\n{out.stderr[-6000:]}"
    assert out.returncode == 0, shown
    assert (work / "tiny-qwen2vl" / "config.json").is_file()
    results = json.loads((work / "care-results" / "results.json").read_text())
    recall = results["recall"]["demo-videos"]
    assert 0.0 <= recall["t2i_r1"] <= 100.0 and results["media"] == {"demo-videos": "video"}
    assert (work / "lens-out" / "lens.json").is_file()
    captions = [json.loads(line) for line in (work / "captions.jsonl").read_text().splitlines()]
    assert len(captions) == 1
    assert (work / "work_dirs" / "care-tiny" / "last_checkpoint").is_file(), shown
