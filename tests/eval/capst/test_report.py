"""CapST reports: Table 2's Markdown layout, the bar plot, and the files written."""

from __future__ import annotations

import json

import pytest

from vlr_plugins.eval.capst import (
    capst_table,
    capst_table_markdown,
    plot_capst_bars,
    write_capst_report,
)


def sample(category, ar, ap, orr, op):
    return {"category": category, "action": {"recall": ar, "precision": ap}, "object": {"recall": orr, "precision": op}}


def result_of(samples, **extra):
    return {"scores": capst_table(samples), "videos": len(samples) + len(extra.get("failed", [])),
            "scored": len(samples), "failed": [], "missing": [], "split_references": False,
            "reference_elements_given": {"events": 0, "objects": 0},
            "requests": {"requests": 8, "calls": 7, "cache_hits": 1, "retries": 2, "malformed": 1, "reasks": 1,
                         "failures": 0, "prompt_tokens": 0, "completion_tokens": 0},
            "samples": samples, **extra}


SAMPLES = [sample("personal care", 0.5, 1.0, 0.25, 0.5), sample("household activities", 1.0, 0.5, 0.5, 0.5)]


def test_markdown_is_table_2s_layout():
    other = [sample("household activities", 0.0, 1.0, 1.0, 1.0)]  # no personal-care video scored
    md = capst_table_markdown({"CaRe": result_of(SAMPLES), "baseline": result_of(other)["scores"]})
    lines = md.splitlines()
    assert lines[0] == ("| Model | Personal Care Action | Personal Care Object | Household Activities Action | "
                        "Household Activities Object | Overall Action | Overall Object |")
    assert lines[1] == "|" + "---|" * 7
    # personal care action: R 50, P 100, F1 66.7; overall action: R 75, P 75, F1 75;
    # overall object: R 37.5, P 50, F1 2 * 37.5 * 50 / 87.5 = 42.9
    assert lines[2] == ("| CaRe | 66.7/50.0/100.0 | 33.3/25.0/50.0 | 66.7/100.0/50.0 | 50.0/50.0/50.0 | "
                        "75.0/75.0/75.0 | 42.9/37.5/50.0 |")
    assert lines[3] == ("| baseline | - | - | 0.0/0.0/100.0 | 100.0/100.0/100.0 | 0.0/0.0/100.0 | "
                        "100.0/100.0/100.0 |")


def test_written_files(tmp_path):
    failed = [{"id": "v9", "stage": "judging events for recall", "error": "HTTP 500: down (after 7 calls)"}]
    result = result_of(SAMPLES, failed=failed, missing=["v8"], judge={"model": "deepseek-chat", "base_url": None})
    files = write_capst_report(result, tmp_path / "report", label="CaRe")
    saved = json.loads((tmp_path / "report" / "capst.json").read_text())
    assert saved["label"] == "CaRe" and saved["failed"] == failed and saved["samples"] == SAMPLES
    md = (tmp_path / "report" / "capst.md").read_text()
    assert md.startswith("# CapST: CaRe\n\nJudge: `deepseek-chat` at the default OpenAI URL.\n")
    assert files["table"] in md
    assert "Scored 2 of 3 videos." in md
    assert "1 video(s) had no caption and were not scored." in md
    assert "- `v9`: judging events for recall: HTTP 500: down (after 7 calls)" in md
    assert "Judge requests: 8 (7 calls, 1 cache hits, 2 retries, 1 malformed answers, 0 failures)." in md
    assert files["json"].endswith("capst.json") and files["markdown"].endswith("capst.md")


def test_bar_plot(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "capst.png"
    plot_capst_bars(result_of(SAMPLES), path, title="CaRe")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    files = write_capst_report(result_of(SAMPLES), tmp_path / "out", label="CaRe")
    assert files["plot"] == str(tmp_path / "out" / "capst.png")
