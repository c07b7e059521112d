"""docs/open_clip.md's "Trying it on a CPU, offline" runs as written: its files are saved and
its ``openclip-offline`` shell block runs verbatim in a fresh folder, in a subprocess, with
HF_HUB_OFFLINE=1 (nothing may be downloaded); then what each step wrote is there and is what
the next step read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _doc_route import route_blocks, run_verbatim

pytest.importorskip("open_clip_train")
pytest.importorskip("PIL")

DOC = Path(__file__).resolve().parents[3] / "docs" / "open_clip.md"


def blocks() -> tuple[dict[str, str], str]:
    return route_blocks(DOC, "openclip-offline")


def test_the_openclip_route_runs_verbatim_offline(tmp_path):
    files, route = blocks()
    assert {"make_pairs.py", "use_clip.py"} <= set(files)
    for step in ("python -m vlr_plugins.integrations.open_clip.tiny", "vlr openclip-train --model local-dir:",
                 "--val-data", "python use_clip.py"):
        assert step in route, step
    work = tmp_path / "work"
    work.mkdir()
    for name, text in files.items():
        (work / name).write_text(text)
    out = run_verbatim(route, work, tmp_path, OMP_NUM_THREADS="1")
    shown = f"\nstdout:\n{out.stdout[-6000:]}\nstderr:\n{out.stderr[-6000:]}"
    assert out.returncode == 0, shown
    assert (work / "tiny-clip" / "open_clip_config.json").is_file()
    assert (work / "logs" / "tiny" / "checkpoints" / "epoch_1.pt").is_file()
    # the run trained the vlr loss on both views (the launcher's summary line)
    assert "vlr: loss MultiPositiveInfoNCELoss" in out.stdout + out.stderr, shown
    assert "texts: caption[all]@77, positives[all]@77" in out.stdout + out.stderr, shown
    val = json.loads((work / "logs" / "tiny" / "checkpoints" / "results.jsonl").read_text().splitlines()[-1])
    printed = re.search(r"text-to-image R@1 on the 8 training pairs: ([\d.]+)", out.stdout)
    assert printed, shown
    # use_clip.py, from the checkpoint, scores what open_clip_train's validation scored
    assert float(printed.group(1)) == pytest.approx(100 * val["text_to_image_R@1"], abs=0.05), shown
