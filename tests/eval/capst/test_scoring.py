"""CapST scoring: per-sample entailed shares (1.0 for an empty list), the F1 of the corpus
means (not the mean of per-sample F1s), per category and overall."""

from __future__ import annotations

import math
import random

import pytest

from vlr_plugins.eval.capst import capst_table, corpus_scores, entailed_share, f1_score


def plain_share(labels):
    if len(labels) == 0:
        return 1.0
    hits = 0
    for label in labels:
        if label == "entailment":
            hits += 1
    return hits / len(labels)


def test_share_of_entailed_elements():
    assert entailed_share(["entailment", "neutral", "contradiction", "entailment"]) == 0.5
    assert entailed_share(["neutral"]) == 0.0
    assert entailed_share(["entailment"]) == 1.0


def test_an_empty_list_scores_one():
    assert entailed_share([]) == 1.0


def test_random_label_lists_match_the_plain_count():
    rng = random.Random(0)
    for _ in range(200):
        labels = [rng.choice(["entailment", "neutral", "contradiction"]) for _ in range(rng.randint(0, 10))]
        assert entailed_share(labels) == plain_share(labels)


def test_f1():
    assert f1_score(0.5, 0.5) == 0.5
    assert f1_score(1.0, 0.0) == 0.0
    assert f1_score(0.0, 0.0) == 0.0
    assert f1_score(0.6, 0.3) == pytest.approx(2 * 0.6 * 0.3 / 0.9)


def test_corpus_f1_is_the_f1_of_the_means_not_the_mean_of_f1s():
    recalls, precisions = [1.0, 0.0, 0.5], [0.0, 1.0, 0.5]
    scores = corpus_scores(recalls, precisions)
    mean_r, mean_p = sum(recalls) / 3, sum(precisions) / 3
    assert scores == {"recall": pytest.approx(100 * mean_r), "precision": pytest.approx(100 * mean_p),
                      "f1": pytest.approx(100 * 2 * mean_r * mean_p / (mean_r + mean_p)), "n": 3}
    mean_of_f1s = sum(f1_score(r, p) for r, p in zip(recalls, precisions)) / 3
    assert scores["f1"] == pytest.approx(50.0)
    assert 100 * mean_of_f1s == pytest.approx(50.0 / 3)  # what the rule is not


def test_no_sample_gives_nan_not_an_error():
    scores = corpus_scores([], [])
    assert scores["n"] == 0 and all(math.isnan(scores[k]) for k in ("f1", "recall", "precision"))
    with pytest.raises(ValueError, match="one precision per recall expected, found 2 and 1"):
        corpus_scores([1.0, 1.0], [1.0])


def sample(category, ar, ap, orr, op):
    return {"category": category, "action": {"recall": ar, "precision": ap}, "object": {"recall": orr, "precision": op}}


def plain_cell(members, column):
    r = sum(m[column]["recall"] for m in members) / len(members)
    p = sum(m[column]["precision"] for m in members) / len(members)
    return {"f1": 100 * (2 * r * p / (r + p) if r + p else 0.0), "recall": 100 * r, "precision": 100 * p,
            "n": len(members)}


def test_table_per_category_in_the_papers_order_then_overall():
    samples = [sample("sports & exercise", 1.0, 0.5, 0.2, 0.4), sample("personal care", 0.0, 1.0, 1.0, 1.0),
               sample("sports & exercise", 0.5, 0.5, 0.0, 0.0), sample("cooking", 0.25, 0.75, 0.5, 0.5)]
    table = capst_table(samples)
    assert list(table) == ["personal care", "sports & exercise", "cooking", "overall"]
    for group, members in [("personal care", [samples[1]]), ("sports & exercise", [samples[0], samples[2]]),
                           ("cooking", [samples[3]]), ("overall", samples)]:
        for column in ("action", "object"):
            assert table[group][column] == pytest.approx(plain_cell(members, column))


def test_overall_weights_samples_not_categories():
    samples = [sample("personal care", 1.0, 1.0, 1.0, 1.0)] + [sample("household activities", 0.0, 0.0, 0.0, 0.0)] * 3
    table = capst_table(samples)
    assert table["overall"]["action"]["recall"] == pytest.approx(25.0)  # not 50, the mean of the 2 categories


def test_without_categories_only_overall():
    table = capst_table([sample(None, 1.0, 1.0, 1.0, 1.0)])
    assert list(table) == ["overall"]
