"""pareto_summary averages R@1 per group and marks the frontier; plot_pareto draws Figure 3."""

from __future__ import annotations

import random

import pytest

from vlr_plugins.eval import pareto_frontier, pareto_summary, plot_pareto

SHORT, LONG = ("flickr30k", "coco"), ("sharegpt4v", "docci")


def brute_force_frontier(points):
    """Reference: p is kept unless some q is >= on both axes and > on one."""
    def dominates(q, p):
        return (q[0] >= p[0] and q[1] >= p[1]) and (q[0] > p[0] or q[1] > p[1])
    return {c for c, p in points.items() if not any(dominates(q, p) for q in points.values())}


def make_results(points_i2t, points_t2i):
    """Results whose short/long averages are the given points: each pair of benchmarks
    straddles its average by +-7, so a wrong average or a mixed-up group shows."""
    results = {}
    for config in points_i2t:
        results[config] = {}
        for axis, (upper, lower) in enumerate((SHORT, LONG)):
            for bench, offset in ((upper, +7.0), (lower, -7.0)):
                results[config][bench] = {
                    "i2t_r1": points_i2t[config][axis] + offset,
                    "t2i_r1": points_t2i[config][axis] + offset,
                    "i2t_r5": 99.0, "t2i_r5": 99.0,
                }
    return results


def test_ties_and_a_dominated_duplicate():
    points = {
        "A": (60.0, 40.0),
        "B": (50.0, 55.0),
        "B-twin": (50.0, 55.0),   # equal to a frontier point: both stay
        "C": (50.0, 50.0),        # same short as B, lower long: dominated by B
        "D": (45.0, 45.0),
        "D-twin": (45.0, 45.0),   # a duplicate that is dominated: both go
        "E": (40.0, 58.0),
        "F": (60.0, 30.0),        # same short as A, lower long
    }
    got = pareto_frontier(points)

    assert set(got) == brute_force_frontier(points) == {"A", "B", "B-twin", "E"}
    assert got == ["E", "B", "B-twin", "A"]  # increasing short, ties in input order


def test_frontier_matches_brute_force_on_random_grids():
    rng = random.Random(0)
    for _ in range(300):
        # a coarse grid so that ties and duplicates are common
        points = {f"c{i}": (float(rng.randint(0, 4)), float(rng.randint(0, 4)))
                  for i in range(rng.randint(1, 9))}
        got = pareto_frontier(points)
        assert set(got) == brute_force_frontier(points), points
        assert len(got) == len(set(got))
        xs = [points[c][0] for c in got]
        ys = [points[c][1] for c in got]
        assert xs == sorted(xs) and ys == sorted(ys, reverse=True)


def test_summary_averages_each_group_per_direction():
    i2t = {"C1": (80.0, 30.0), "C4": (76.0, 60.0), "C7": (70.0, 25.0)}
    t2i = {"C1": (60.0, 40.0), "C4": (60.0, 58.0), "C7": (61.0, 20.0)}
    results = make_results(i2t, t2i)

    got = pareto_summary(results, short=SHORT, long=LONG)

    assert got["short"] == list(SHORT) and got["long"] == list(LONG) and got["k"] == 1
    for direction, expected in (("i2t", i2t), ("t2i", t2i)):
        points = got[direction]["points"]
        assert list(points) == ["C1", "C4", "C7"]
        for config, (short, long) in expected.items():
            assert points[config] == {"short": pytest.approx(short), "long": pytest.approx(long)}
        assert set(got[direction]["frontier"]) == brute_force_frontier(expected)
    assert got["i2t"]["frontier"] == ["C4", "C1"]
    assert got["t2i"]["frontier"] == ["C4", "C7"]


def test_k_selects_the_recall():
    results = make_results({"A": (10.0, 20.0)}, {"A": (30.0, 40.0)})
    got = pareto_summary(results, k=5)
    assert got["i2t"]["points"]["A"] == {"short": 99.0, "long": 99.0}


def test_a_missing_benchmark_is_named():
    results = make_results({"A": (10.0, 20.0)}, {"A": (30.0, 40.0)})
    del results["A"]["docci"]
    with pytest.raises(KeyError, match="config 'A' has no results for benchmark 'docci'"):
        pareto_summary(results)


def test_plot_is_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    i2t = {"BLIP0": (70.0, 35.0), "C1": (80.0, 30.0), "C4": (76.0, 60.0), "C5": (78.0, 60.0)}
    t2i = {"BLIP0": (65.0, 43.5), "C1": (60.0, 40.0), "C4": (60.0, 58.0), "C5": (61.0, 57.0)}
    summary = pareto_summary(make_results(i2t, t2i))
    path = tmp_path / "figs" / "pareto.png"

    plot_pareto(summary, path, title="Figure 3")

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000
    assert sorted(p.name for p in path.parent.iterdir()) == ["pareto.png"]  # no temp file left


def test_a_rank_metric_is_minimised_and_any_metric_is_read():
    # MdR per config and benchmark: lower is better, so the frontier is the lower-left staircase
    points = {"A": (2.0, 9.0), "B": (3.0, 4.0), "C": (4.0, 5.0), "D": (6.0, 3.0), "E": (3.0, 4.0)}
    results = {c: {b: {"i2t_mdr": p[axis], "t2i_mdr": p[1 - axis], "i2t_r1": 50.0, "t2i_r1": 50.0,
                       "i2t_mrr@10": p[axis] / 10, "t2i_mrr@10": p[axis] / 10}
                   for axis, group in enumerate((SHORT, LONG)) for b in group} for c, p in points.items()}
    summary = pareto_summary(results, SHORT, LONG, metric="MdR")
    assert summary["metric"] == "mdr" and summary["lower_is_better"] is True
    assert summary["i2t"]["points"]["C"] == {"short": 4.0, "long": 5.0}
    lowest = {c: (-x, -y) for c, (x, y) in points.items()}  # minimising = maximising the negation
    assert set(summary["i2t"]["frontier"]) == brute_force_frontier(lowest) == {"A", "B", "E", "D"}
    assert pareto_frontier(points, lower_is_better=True) == ["A", "B", "E", "D"]
    assert set(summary["t2i"]["frontier"]) == brute_force_frontier({c: (-y, -x) for c, (x, y) in points.items()})
    # a higher-is-better rank metric (MRR@10) keeps the maximising frontier
    mrr = pareto_summary(results, SHORT, LONG, metric="mrr@10")
    assert mrr["lower_is_better"] is False and mrr["i2t"]["frontier"] == pareto_frontier(
        {c: (x / 10, y / 10) for c, (x, y) in points.items()}) == ["A", "C", "D"]
    with pytest.raises(KeyError, match="lack 'i2t_mnr'"):
        pareto_summary(results, SHORT, LONG, metric="mnr")
    with pytest.raises(ValueError, match="unknown metric 'median'"):
        pareto_summary(results, SHORT, LONG, metric="median")


def test_a_rank_pareto_is_plotted(tmp_path):
    pytest.importorskip("matplotlib")
    results = {c: {b: {"i2t_mnr": v + i, "t2i_mnr": v - i} for i, b in enumerate(SHORT + LONG)}
               for c, v in (("A", 5.0), ("B", 7.0))}
    plot_pareto(pareto_summary(results, SHORT, LONG, metric="mnr"), tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
