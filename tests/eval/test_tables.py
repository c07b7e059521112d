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
        if layout.protocol is None:  # a layout without a paper's numbers: its benchmarks are still named so
            assert all(any(b in e for e in list_protocols().values()) for b in layout.benchmarks()), layout.name
            continue
        entries = list_protocols()[layout.protocol]
        assert all(b.split("/")[0] in entries for b in layout.benchmarks()), layout.name


@pytest.mark.parametrize("bench", ["msrvtt", "msvd", "lsmdc", "didemo", "activitynet"])
def test_the_clip4clip_layout_is_r1_r5_r10_mdr_mnr_text_to_video_then_video_to_text(bench):
    layout = list_tables()[f"clip4clip-{bench}"]
    heads = ("R@1", "R@5", "R@10", "MdR↓", "MnR↓")
    assert [c.levels[1:] for c in layout.columns] == [(d, h) for d in ("Text-to-Video", "Video-to-Text")
                                                      for h in heads]
    assert [(c.benchmark, c.metric) for c in layout.columns] == [
        (bench, f"{d}_{m}") for d in ("t2i", "i2t") for m in ("r1", "r5", "r10", "mdr", "mnr")]
    assert layout.metrics() == ["r@1", "r@5", "r@10", "mdr", "mnr"] and layout.protocol is None
    assert list_tables()["carebench-table4"].metrics() == ["r@1", "r@5", "r@10"]  # ReBias reads the six recalls


def test_a_rank_table_shows_lower_is_better_and_says_which_metric_is_missing():
    ranks = {"t2i_r1": 40.0, "t2i_r5": 70.0, "t2i_r10": 80.0, "t2i_mdr": 2.0, "t2i_mnr": 16.75,
             "i2t_r1": 41.0, "i2t_r5": 71.0, "i2t_r10": 81.0, "i2t_mdr": 2.5, "i2t_mnr": 12.25}
    table = fill_table(list_tables()["clip4clip-msrvtt"], {"msrvtt": ranks}, "m", protocol="carebench/zero-shot")
    lines = table_markdown(table).splitlines()
    assert lines[5] == "|  | R@1 | R@5 | R@10 | MdR↓ | MnR↓ | R@1 | R@5 | R@10 | MdR↓ | MnR↓ |"
    assert lines[6] == "| m | 40.0 | 70.0 | 80.0 | 2.0 | 16.8 | 41.0 | 71.0 | 81.0 | 2.5 | 12.2 |"
    assert "Note" not in table_markdown(table)  # a layout follows no paper's protocol
    recall_only = {k: v for k, v in ranks.items() if "md" not in k and "mn" not in k}
    with pytest.raises(KeyError, match="lack 't2i_mdr'.*compute metric mdr"):
        fill_table(list_tables()["clip4clip-msrvtt"], {"msrvtt": recall_only}, "m")


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
