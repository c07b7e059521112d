"""docs/mvc.md's "Trying it on a CPU, offline" runs as written: its file is saved and its
``mvc-offline`` shell block runs verbatim in a fresh folder, in a subprocess, with
HF_HUB_OFFLINE=1 (nothing may be downloaded); then what each step wrote is there and is what
the next step read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _doc_route import route_blocks, run_verbatim

pytest.importorskip("mmengine")
pytest.importorskip("av")

DOC = Path(__file__).resolve().parents[3] / "docs" / "mvc.md"


def blocks() -> tuple[dict[str, str], str]:
    return route_blocks(DOC, "mvc-offline")


def test_the_mvc_route_runs_verbatim_offline(tmp_path):
    files, route = blocks()
    for step in ("vlr demo mvc --quick --world-only", "vlr train mvc/", "vlr precompute", "--encoder vlr:",
                 "vlr eval", "vlr export"):
        assert step in route, step
    work = tmp_path / "work"
    work.mkdir()
    for name, text in files.items():
        (work / name).write_text(text)
    out = run_verbatim(route, work, tmp_path, OMP_NUM_THREADS="1")
    shown = f"\nstdout:\n{out.stdout[-6000:]}\nstderr:\n{out.stderr[-6000:]}"
    assert out.returncode == 0, shown
    assert not (work / "demo" / "runs").exists(), "--world-only trains nothing"
    ckpt = work / "work_dirs" / "mvc-tiny" / "epoch_1.pth"
    assert f"checkpoint: {ckpt}" in out.stdout and "vtc_detailed" in out.stdout, shown
    index = json.loads((work / "stores" / "mvc-tiny" / "index.json").read_text())
    assert index["meta"]["encoder"] == "vlr:work_dirs/mvc-tiny/epoch_1.pth" and index["count"] == 8, index
    results = json.loads((work / "mvc-results" / "results.json").read_text())
    for split in ("summary", "detailed"):
        recall = results["recall"][split]
        assert 0.0 <= recall["t2i_r1"] <= recall["t2i_r5"] <= 100.0, recall
    export = work / "exports" / "mvc-tiny"
    assert json.loads((export / "config.json").read_text())["video_config"]
    assert (export / "model.safetensors").is_file() and (export / "tokenizer.json").is_file()
    assert json.loads((export / "eval_results.json").read_text())["recall"] == results["recall"]
