"""The corpus audit against numbers worked out by hand: words per view (mean, population
std), content-word Jaccard and exact matches of refinements, score histograms, paragraph
lengths, failures."""

from __future__ import annotations

import json
import math

import pytest

from vlr_plugins.generate.audit import (
    content_jaccard,
    content_words,
    corpus_audit,
    format_audit,
    mvc_audit,
    paragraph_audit,
    plot_audit,
)


def test_content_words_drop_function_words_and_case():
    assert content_words("The man IS walking his dog, and the dog's tail wags.") == {
        "man", "walking", "dog", "dog's", "tail", "wags"}


def test_jaccard_by_hand():
    # {red, car, parked, street} vs {blue, car, parked, road}: 2 shared of 6
    assert content_jaccard("A red car parked on the street.", "A blue car is parked on a road.") == pytest.approx(2 / 6)
    assert content_jaccard("The.", "a") == 1.0  # no content words on either side


MVC = [
    {"id": "a", "O": "a dog", "S1": "a dog runs", "S2": "dog runs fast now", "D1": "a red car parked on the street",
     "D2": "two cats sleep", "D1*": "a blue car is parked on a road", "D2*": "two cats sleep",
     "P1": "x y", "P2": "x y z", "failures": []},
    {"id": "b", "O": "a cat", "S1": "cat", "S2": None, "D1": "man walking", "D2": "a bird",
     "D1*": "man  walking ", "D2*": None, "P1": None, "P2": None,
     "failures": [{"stage": "refine", "prompt": "refine"}, {"stage": "positives", "prompt": "positives"}]},
]


def test_mvc_audit_by_hand():
    audit = mvc_audit(MVC)
    assert audit["records"] == 2
    # S1: 3 and 1 words -> mean 2, population std 1
    assert audit["views"]["S1"] == {"n": 2, "mean": 2.0, "std": 1.0}
    assert audit["views"]["S2"] == {"n": 1, "mean": 4.0, "std": 0.0}
    # D1: 7 and 2 words -> mean 4.5, std 2.5
    assert audit["views"]["D1"] == {"n": 2, "mean": 4.5, "std": 2.5}
    assert audit["views"]["P1"]["n"] == 1 and audit["views"]["O"]["mean"] == 2.0
    # D1 -> D1*: Jaccard 2/6 and 1 (same words), one exact match after whitespace is normalised
    d1 = audit["refinement"]["D1->D1*"]
    assert d1["pairs"] == 2 and d1["jaccard"] == pytest.approx((2 / 6 + 1) / 2) and d1["exact_match_rate"] == 0.5
    d2 = audit["refinement"]["D2->D2*"]
    assert d2 == {"pairs": 1, "jaccard": 1.0, "exact_match_rate": 1.0}
    assert audit["failures"] == {"positives/positives": 1, "refine/refine": 1}


PARAGRAPHS = [
    {"id": "1", "paragraph": " ".join(["w"] * 12), "score": 7,
     "attempts": [{"attempt": 1, "score": 3}, {"attempt": 2, "score": 7}], "failures": []},
    {"id": "2", "paragraph": " ".join(["w"] * 25), "score": 9, "attempts": [{"attempt": 1, "score": 9}],
     "failures": []},
    {"id": "3", "paragraph": " ".join(["w"] * 5), "score": 5,
     "attempts": [{"attempt": 1, "score": 5}, {"attempt": 2, "score": 2}, {"attempt": 3, "score": 4}],
     "failures": []},
    {"id": "4", "paragraph": None, "score": None, "attempts": [{"attempt": 1, "score": None}],
     "failures": [{"stage": "texts", "prompt": "paragraph"}]},
]


def test_paragraph_audit_by_hand():
    audit = paragraph_audit(PARAGRAPHS)
    assert audit["scores"] == {"5": 1, "7": 1, "9": 1}
    assert audit["attempt_scores"] == {"2": 1, "3": 1, "4": 1, "5": 1, "7": 1, "9": 1}
    assert audit["unscored"] == 1 and audit["regenerated"] == 2
    assert audit["attempts"] == {"1": 2, "2": 1, "3": 1}
    p = audit["paragraphs"]
    mean = (12 + 25 + 5) / 3
    std = math.sqrt(((12 - mean) ** 2 + (25 - mean) ** 2 + (5 - mean) ** 2) / 3)
    assert p["n"] == 3 and p["mean"] == pytest.approx(mean) and p["std"] == pytest.approx(std)
    # sorted 5, 12, 25: p10 at rank 0.2 -> 5 + 0.2 * 7; median 12; p90 at rank 1.8 -> 12 + 0.8 * 13
    assert (p["min"], p["p10"], p["p50"], p["p90"], p["max"]) == (5, pytest.approx(6.4), 12, pytest.approx(22.4), 25)
    assert p["histogram"] == {"0-9": 1, "10-19": 1, "20-29": 1}
    assert audit["failures"] == {"texts/paragraph": 1}


def test_corpus_audit_reads_a_file_or_a_folder_and_prints_and_plots(tmp_path):
    path = tmp_path / "mvc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in MVC), encoding="utf-8")
    audit = corpus_audit(path)
    assert audit == mvc_audit(MVC)
    text = format_audit(audit)
    assert "| D1 | 2 | 4.5 | 2.5 |" in text and "| D1->D1* | 2 | 0.667 | 50.00% |" in text
    assert plot_audit(audit, tmp_path / "mvc.png").stat().st_size > 0
    p = tmp_path / "paragraph.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in PARAGRAPHS), encoding="utf-8")
    text = format_audit(corpus_audit(p))
    assert "| 5 | 1 | 1 |" in text and "regenerated: 2" in text and "texts/paragraph 1" in text
    assert plot_audit(corpus_audit(p), tmp_path / "p.svg").stat().st_size > 0
