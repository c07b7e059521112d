"""The names `vlr eval --metrics` takes: recall r@K and every rank metric the engine's parser
accepts, checked (known, K >= 1, each once, K within both galleries), with their headers."""

from __future__ import annotations

import pytest

from vlr_plugins.errors import UsageError
from vlr_plugins.eval.best_rank_metrics import RANK_METRICS, parse_rank_metric
from vlr_plugins.eval.metric_names import (
    DEFAULT_METRICS,
    lower_is_better,
    metric_label,
    metric_of_key,
    parse_metrics,
    result_key,
)


def test_recall_and_rank_metrics_split_into_the_engine_s_two_arguments():
    choice = parse_metrics("R@1,r@5,MdR,mnr,mrr@10", "--metrics")
    assert choice.names == ("r@1", "r@5", "mdr", "mnr", "mrr@10")
    assert choice.ks == (1, 5) and choice.rank_metrics == ("mdr", "mnr", "mrr@10")
    assert choice.keys() == ["i2t_r1", "i2t_r5", "i2t_mdr", "i2t_mnr", "i2t_mrr@10",
                             "t2i_r1", "t2i_r5", "t2i_mdr", "t2i_mnr", "t2i_mrr@10"]
    assert parse_metrics(None).names == DEFAULT_METRICS == ("r@1", "r@5", "r@10")


def test_every_name_the_engine_s_parser_takes_is_a_metric():
    # the parser's own list, with K filled in: whatever the engine adds flows through
    for name in RANK_METRICS:
        concrete = name.replace("@K", "@7").lower()
        parse_rank_metric(concrete)
        assert parse_metrics([concrete]).rank_metrics == (concrete,)
        assert result_key(concrete, "t2i") == f"t2i_{concrete}"
        assert metric_of_key(f"i2t_{concrete}") == ("i2t", concrete)


@pytest.mark.parametrize("name, label, lower", [
    ("r@1", "R@1", False), ("mdr", "MdR↓", True), ("mnr", "MnR↓", True), ("mrr@10", "MRR@10", False)])
def test_headers_mark_what_is_lower_is_better(name, label, lower):
    assert metric_label(name) == label and lower_is_better(name) is lower


@pytest.mark.parametrize("text, words", [
    ("r@1,median", ["--metrics", "unknown metric 'median'", "r@K, mdr, mnr, mrr@K"]),
    ("mrr", ["--metrics", "unknown metric 'mrr'"]),
    ("r@0", ["--metrics", "'r@0'", "K must be >= 1"]),
    ("mrr@0", ["--metrics", "'mrr@0'", "K must be >= 1"]),
    ("r@-2", ["--metrics", "K must be >= 1"]),
    ("r@1,R@1,mdr", ["--metrics", "r@1 named twice"]),
    ("r@1,,mdr", ["--metrics", "separated by commas"]),
])
def test_bad_names_are_one_usage_error_naming_the_option(text, words):
    with pytest.raises(UsageError) as err:
        parse_metrics(text, "--metrics")
    for w in words:
        assert w in str(err.value)


def test_k_is_checked_against_both_galleries():
    choice = parse_metrics("r@1,mrr@4", "--metrics")
    choice.check_gallery("toy", 4, 9)
    with pytest.raises(UsageError, match=r"--metrics: mrr@4 looks at the top 4, but benchmark 'toy' \(b.yaml, "
                                         r"benchmark 1\) has 3 items .* and 9 texts .*choose K <= 3"):
        choice.check_gallery("toy", 3, 9, "b.yaml, benchmark 1")
    parse_metrics("mdr,mnr").check_gallery("toy", 1, 1)  # no K: any gallery
