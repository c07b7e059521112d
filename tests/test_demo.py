"""The main job, small: the demo trains C1/C5/C7 through the Runner and reports honestly."""

from __future__ import annotations

import json
import logging

import pytest

pytest.importorskip("mmengine")


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
    printed = capsys.readouterr().out
    assert "| C7 |" in printed and "report.md" in printed
    for name in ("C1", "C5", "C7"):
        assert (out / "runs" / name / "epoch_1.pth").exists()
