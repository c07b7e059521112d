"""The main job, small: the demo trains C1/C5/C7 through the Runner and reports honestly."""

from __future__ import annotations

import json
import logging
import re

import pytest

from vlr_plugins.eval import TRUNCATION_BUDGETS

pytest.importorskip("mmengine")
from vlr_plugins.integrations.mmengine.console import NOISE  # noqa: E402


def test_quick_demo_writes_report_table_and_plot(tmp_path, capsys):
    from vlr_plugins.cli import main

    out = tmp_path / "demo"
    try:
        assert main(["demo", "--quick", "--out", str(out)]) == 0
    finally:
        logging.getLogger("mmengine").handlers.clear()
    report = json.loads((out / "report.json").read_text())
    assert list(report["results"]) == ["untrained", "C1", "C5", "C7"]
    for row in report["results"].values():
        assert set(row) == {"short", "long"}
        assert 0.0 <= row["long"]["i2t_r1"] <= row["long"]["i2t_r5"] <= row["long"]["i2t_r10"] <= 100.0
    md = (out / "report.md").read_text()
    assert "| C5 |" in md and "C5 (caption + paragraph) minus C1" in md
    assert (out / "recall.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the truncation sweep of the long split, one curve per configuration; at 128 tokens it
    # encodes exactly as the long split's own evaluation does
    budgets = [str(b) for b in TRUNCATION_BUDGETS]
    assert list(report["truncation"]) == ["untrained", "C1", "C5", "C7"]
    for config, curve in report["truncation"].items():
        assert list(curve) == budgets
        assert curve["128"] == report["results"][config]["long"]
    assert report["world"]["description_tokens"] == 128
    assert "## Truncation" in md and "| C5 | " + " / ".join(
        f"{report['truncation']['C5']['20'][m]:.1f}" for m in ("i2t_r1", "t2i_r1")) in md
    assert (out / "truncation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    captured = capsys.readouterr()
    printed = captured.out
    assert "| C7 |" in printed and "report.md" in printed and "truncation.png" in printed
    assert "| long R@1 (I2T / T2I) at | 20 tokens |" in printed
    # MMEngine's notices stay in each run's log, off the console
    for notice in NOISE:
        assert not re.search(notice.message, captured.out + captured.err), notice.message
    for name in ("C1", "C5", "C7"):
        assert (out / "runs" / name / "epoch_1.pth").exists()
        (log,) = (out / "runs" / name).glob("*/*.log")
        assert re.search(NOISE[0].message, log.read_text())
