"""The papers' tables: columns in the papers' order with the papers' directions and metrics,
filled from recall results, written as Markdown and a plot."""

from __future__ import annotations

import pytest

from vlr_plugins.eval import fill_table, list_protocols, list_tables, plot_table, table_markdown

T2V = [f"t2i_r{k}" for k in (1, 5, 10)]
V2T = [f"i2t_r{k}" for k in (1, 5, 10)]


def columns(name):
    return [(c.label, c.benchmark, c.metric) for c in list_tables()[name].columns]


def test_mvc_table_1_is_text_to_video_r1_on_five_benchmarks():
    # multi-view-captions.txt, Table 1: | Method | #Samples | Source | MSR-VTT | DiDeMo | ActivityNet | LSMDC | MSVD |
    assert columns("mvc-table1") == [("MSR-VTT R@1", "msrvtt", "t2i_r1"), ("DiDeMo R@1", "didemo", "t2i_r1"),
                                     ("ActivityNet R@1", "activitynet", "t2i_r1"), ("LSMDC R@1", "lsmdc", "t2i_r1"),
                                     ("MSVD R@1", "msvd", "t2i_r1")]


def test_mvc_table_3_is_text_to_video_r1_on_six_fine_grained_settings():
    # Table 3: | CARE-S | CARE-T | DREAM-D | DREAM-E | S2S-W | S2S-S |, all R@1, text-to-video
    assert columns("mvc-table3") == [
        ("CARE-S R@1", "carebench/spatial", "t2i_r1"), ("CARE-T R@1", "carebench/temporal", "t2i_r1"),
        ("DREAM-D R@1", "dream1k/detailed", "t2i_r1"), ("DREAM-E R@1", "dream1k/event", "t2i_r1"),
        ("S2S-W R@1", "shot2story-clip", "t2i_r1"), ("S2S-S R@1", "shot2story-shot", "t2i_r1")]


def test_carebench_table_3_is_general_retrieval_text_to_video_then_video_to_text():
    layout = list_tables()["carebench-table3"]
    assert [c.levels for c in layout.columns] == [
        ("CaReBench General Retrieval", direction, f"R@{k}")
        for direction in ("Text-to-Video", "Video-to-Text") for k in (1, 5, 10)]
    assert [(c.benchmark, c.metric) for c in layout.columns] == [("carebench/general", m) for m in T2V + V2T]


def test_carebench_table_4_is_spatial_then_temporal_then_rebias():
    layout = list_tables()["carebench-table4"]
    assert [c.levels for c in layout.columns] == [
        (f"CaReBench {kind} Retrieval", direction, f"R@{k}") for kind in ("Spatial", "Temporal")
        for direction in ("Text-to-Video", "Video-to-Text") for k in (1, 5, 10)] + [("ReBias%↓",)]
    assert [(c.benchmark, c.metric) for c in layout.columns[:12]] == (
        [("carebench/spatial", m) for m in T2V + V2T] + [("carebench/temporal", m) for m in T2V + V2T])
    assert layout.columns[12].rebias == ("carebench/spatial", "carebench/temporal")
    assert layout.benchmarks() == ["carebench/spatial", "carebench/temporal"]


def test_each_table_names_the_protocol_its_benchmarks_follow():
    for layout in list_tables().values():
        entries = list_protocols()[layout.protocol]
        assert all(b.split("/")[0] in entries for b in layout.benchmarks()), layout.name


def recalls(t2v, v2t):
    return {**dict(zip(T2V, t2v)), **dict(zip(V2T, v2t))}


# CaReBench Table 4, CLIP B/16: spatial, then temporal, each T2V R@1/5/10, V2T R@1/5/10; ReBias 17.75
CLIP_B16 = {"carebench/spatial": recalls((45.6, 79.0, 89.2), (47.6, 80.9, 90.8)),
            "carebench/temporal": recalls((30.3, 65.1, 79.8), (35.8, 71.0, 85.8))}


def test_a_filled_table_reproduces_a_row_of_the_paper():
    table = fill_table(list_tables()["carebench-table4"], CLIP_B16, "CLIP B/16", protocol="carebench/zero-shot")
    values = table["rows"][0]["values"]
    assert values[:12] == [45.6, 79.0, 89.2, 47.6, 80.9, 90.8, 30.3, 65.1, 79.8, 35.8, 71.0, 85.8]
    assert round(values[12], 2) == 17.75
    assert table["missing"] == [] and table["rows"][0]["model"] == "CLIP B/16"
    markdown = table_markdown(table)
    lines = markdown.splitlines()
    assert lines[2] == ("| Model | CaReBench Spatial Retrieval |  |  |  |  |  | CaReBench Temporal Retrieval |  |  |  "
                        "|  |  | ReBias%↓ |")
    assert lines[4] == ("|  | Text-to-Video |  |  | Video-to-Text |  |  | Text-to-Video |  |  | Video-to-Text |  |  "
                        "|  |")
    assert lines[5] == "|  | R@1 | R@5 | R@10 | R@1 | R@5 | R@10 | R@1 | R@5 | R@10 | R@1 | R@5 | R@10 |  |"
    assert lines[6] == ("| CLIP B/16 | 45.6 | 79.0 | 89.2 | 47.6 | 80.9 | 90.8 | 30.3 | 65.1 | 79.8 | 35.8 | 71.0 "
                        "| 85.8 | 17.75 |")
    assert "Note" not in markdown


def test_benchmarks_not_scored_are_left_empty_and_said():
    table = fill_table(list_tables()["mvc-table3"], CLIP_B16, "CLIP B/16", protocol="carebench/zero-shot")
    assert table["rows"][0]["values"] == [45.6, 30.3, None, None, None, None]
    assert table["missing"] == ["dream1k/detailed", "dream1k/event", "shot2story-clip", "shot2story-shot"]
    markdown = table_markdown(table)
    assert "| CLIP B/16 | 45.6 | 30.3 | – | – | – | – |" in markdown
    assert "follow protocol multi-view-captions/zero-shot; this run used carebench/zero-shot" in markdown
    assert "not scored in this run: dream1k/detailed, dream1k/event, shot2story-clip, shot2story-shot" in markdown
    # ReBias needs both variants
    half = fill_table(list_tables()["carebench-table4"], {"carebench/spatial": CLIP_B16["carebench/spatial"]}, "x")
    assert half["rows"][0]["values"][6:] == [None] * 7
    # and a defined ratio: with every temporal recall 0 it is left empty
    zero = {**CLIP_B16, "carebench/temporal": recalls((0.0, 0.0, 0.0), (0.0, 0.0, 0.0))}
    assert fill_table(list_tables()["carebench-table4"], zero, "x")["rows"][0]["values"][12] is None


def test_a_table_is_plotted(tmp_path):
    pytest.importorskip("matplotlib")
    table = fill_table(list_tables()["carebench-table4"], CLIP_B16, "CLIP B/16")
    plot_table(table, tmp_path / "t.png")
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"
