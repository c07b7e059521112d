"""``vlr mteb --model EXPORT --tasks module:Class --out DIR``: MTEB's result files plus results.json / results.md."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("mteb")

from _refusal import run_vlr  # noqa: E402

# a task of one's own, named on the command line as mteb_cli_tasks:ColourT2I (the current folder is importable)
TASKS = '''
import numpy as np
from PIL import Image
from _mteb_local import local_task

rng = np.random.default_rng(0)
IMAGES = [Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)) for _ in range(6)]
TEXTS = [f"picture {i}" for i in range(6)]
ColourT2I = type(local_task("ColourT2I", "t2i", {"text": TEXTS}, {"image": IMAGES}, {i: [i] for i in range(6)}))
'''


def test_vlr_mteb_writes_mteb_results_and_a_summary(open_clip_export, tmp_path):
    (tmp_path / "mteb_cli_tasks.py").write_text(TASKS)
    out = tmp_path / "results"
    code, stdout, stderr = run_vlr(["mteb", "--model", open_clip_export, "--tasks", "mteb_cli_tasks:ColourT2I",
                                    "--out", out, "--device", "cpu", "--batch-size", "4", "--quiet"], cwd=tmp_path)
    assert code == 0, stderr[-3000:]
    summary = json.loads((out / "results.json").read_text())
    assert summary["kind"] == "open_clip" and summary["modalities"] == ["text", "image"]
    scores = summary["tasks"]["ColourT2I"]["test"]["default"]
    # MTEB's own file for the task, under its results folder, holds the same scores
    (task_file,) = out.glob(f"results/*/{summary['revision']}/ColourT2I.json")
    mteb_scores = json.loads(task_file.read_text())["scores"]["test"][0]
    assert scores["ndcg_at_10"] == mteb_scores["ndcg_at_10"] and scores["main_score"] == mteb_scores["main_score"]
    assert (task_file.parent / "model_meta.json").is_file()
    assert "| ColourT2I | test | default |" in (out / "results.md").read_text()
