"""CaRe's unified score: the mean of Avg R@1 (general retrieval, both directions) and Avg F1
(CapST action and object)."""

from __future__ import annotations

import pytest

from vlr_plugins.errors import ConfigError
from vlr_plugins.eval.capst import unified_score

CAPST = {"scores": {"overall": {"action": {"f1": 35.1, "recall": 26.6, "precision": 51.4},
                                "object": {"f1": 31.7, "recall": 21.8, "precision": 57.8}}}}


def plain(t2v, v2t, action, obj):
    return ((t2v + v2t) / 2 + (action + obj) / 2) / 2


def test_the_papers_care_row():
    # CaReBench Table 3 (CaRe: T2V R@1 77.0, V2T R@1 79.0) and Table 2 (overall F1 35.1 / 31.7) give
    # Table 5's last row: Avg R@1 78.0, Avg F1 33.4, unified score 55.7
    out = unified_score({"t2i_r1": 77.0, "i2t_r1": 79.0, "t2i_r5": 95.6}, CAPST)
    assert out == pytest.approx({"avg_r1": 78.0, "avg_f1": 33.4, "unified": 55.7})
    assert out["unified"] == pytest.approx(plain(77.0, 79.0, 35.1, 31.7))


def test_vlr_eval_results_pick_carebench_general():
    retrieval = {"recall": {"carebench/general": {"t2i_r1": 60.0, "i2t_r1": 50.0},
                            "carebench/spatial": {"t2i_r1": 1.0, "i2t_r1": 1.0}}}
    assert unified_score(retrieval, CAPST["scores"])["avg_r1"] == pytest.approx(55.0)
    assert unified_score(retrieval, CAPST, benchmark="carebench/spatial")["avg_r1"] == pytest.approx(1.0)
    only = {"recall": {"my-care": {"t2i_r1": 10.0, "i2t_r1": 20.0}}}
    assert unified_score(only, CAPST)["unified"] == pytest.approx(plain(10.0, 20.0, 35.1, 31.7))


def test_ambiguous_or_incomplete_inputs_say_what_is_missing():
    with pytest.raises(ConfigError, match="several benchmarks \\(msrvtt, didemo\\)"):
        unified_score({"recall": {"msrvtt": {}, "didemo": {}}}, CAPST)
    with pytest.raises(ConfigError, match="no benchmark 'carebench' \\(found msrvtt\\)"):
        unified_score({"recall": {"msrvtt": {}}}, CAPST, benchmark="carebench")
    with pytest.raises(ConfigError, match="missing i2t_r1"):
        unified_score({"recall": {"carebench": {"t2i_r1": 1.0}}}, CAPST)
    with pytest.raises(ConfigError, match="CapST results: expected"):
        unified_score({"t2i_r1": 1.0, "i2t_r1": 1.0}, {"overall": {"action": {"f1": 1.0}}})
