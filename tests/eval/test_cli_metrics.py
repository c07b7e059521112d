"""`vlr eval --metrics`: the real command on a tiny benchmark (a retrieval_jsonl file, its store and
a module:callable text model written here), with exact ties; every number equal to a plain
reference computed here from the full score matrix, and the Markdown carrying the columns."""

from __future__ import annotations

import json
import math
import statistics

import pytest
import torch

from vlr_plugins.cli import main

N_ITEMS = 12


def problem():
    """12 items (items 3 and 8 equal: text-to-item ties), 1-3 texts each (texts of items 1 and 6
    equal: item-to-text ties), noisy enough that ranks spread."""
    g = torch.Generator().manual_seed(3)
    items = torch.randn(N_ITEMS, 5, generator=g)
    items[8] = items[3]
    per_item = [1 + (i * 7) % 3 for i in range(N_ITEMS)]
    owner = torch.tensor([i for i, n in enumerate(per_item) for _ in range(n)])  # as the file lists them
    texts = items[owner] + 1.3 * torch.randn(len(owner), 5, generator=g)
    first_1, first_6 = int((owner == 1).nonzero()[0]), int((owner == 6).nonzero()[0])
    texts[first_6] = texts[first_1]
    return items, texts, owner


def reference(items, texts, owner, names):
    """Each metric from the full float64 cosine matrix: the 0-based rank of a query's best
    positive counts the candidates scored higher, or equal with a lower gallery index."""
    items, texts = items.double(), texts.double()
    S = (items / items.norm(dim=1, keepdim=True)) @ (texts / texts.norm(dim=1, keepdim=True)).T

    def best_rank(row, positives):
        order = sorted(range(len(row)), key=lambda j: (-float(row[j]), j))
        return min(order.index(p) for p in positives)

    ranks = {"i2t": [best_rank(S[i], [j for j in range(len(owner)) if owner[j] == i]) for i in range(len(items))],
             "t2i": [best_rank(S[:, j], [int(owner[j])]) for j in range(len(owner))]}
    out = {}
    for d, rs in ranks.items():
        one = [r + 1 for r in rs]
        for name in names:
            if name.startswith("r@"):
                out[f"{d}_r{name[2:]}"] = 100.0 * sum(r < int(name[2:]) for r in rs) / len(rs)
            elif name == "mdr":
                out[f"{d}_mdr"] = float(statistics.median(one))
            elif name == "mnr":
                out[f"{d}_mnr"] = sum(one) / len(one)
            elif name.startswith("mrr@"):
                k = int(name[4:])
                out[f"{d}_{name}"] = sum(1 / r for r in one if r <= k) / len(one)
    return out, ranks


@pytest.fixture()
def world(tmp_path, monkeypatch):
    from vlr_plugins.data import EmbeddingStoreWriter

    items, texts, owner = problem()
    strings = [f"text {j}" for j in range(len(owner))]
    lines = [{"id": f"v{i}", "texts": [s for s, o in zip(strings, owner.tolist()) if o == i]} for i in range(N_ITEMS)]
    (tmp_path / "split.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    with EmbeddingStoreWriter(tmp_path / "store", items.shape[1]) as writer:
        writer.add([f"v{i}" for i in range(N_ITEMS)], items)
    (tmp_path / "bench.yaml").write_text("benchmarks:\n  - {name: msrvtt, reader: retrieval_jsonl, "
                                         "path: split.jsonl, item_embeddings: store}\n")
    vectors = {s: row.tolist() for s, row in zip(strings, texts)}
    (tmp_path / "toy_metric_model.py").write_text(
        f"import torch\n\nVECTORS = {json.dumps(vectors)}\n\n"
        "class Model:\n    def encode_text(self, texts):\n        return torch.tensor([VECTORS[t] for t in texts])\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.dont_write_bytecode", True)
    return items, texts, owner


def run(*more):
    return main(["eval", "--model", "toy_metric_model:Model", "--benchmarks", "bench.yaml", "--protocol", "none",
                 "--out", "out", *more])


def test_the_chosen_metrics_equal_the_full_matrix_reference(world, tmp_path):
    names = ["r@1", "r@3", "mdr", "mnr", "mrr@4"]
    assert run("--metrics", ",".join(names)) == 0
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    expected, ranks = reference(*world, names)
    assert len(set(ranks["t2i"])) > 3 and len(set(ranks["i2t"])) > 3  # the ranks spread
    got = report["recall"]["msrvtt"]
    assert {k: got[k] for k in expected} == pytest.approx(expected, abs=1e-12)
    assert report["metrics"] == names
    assert "i2t_r5" not in got and "i2t_r10" not in got  # only what was asked
    md = (tmp_path / "out" / "results.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| config"))
    assert header == ("| config | msrvtt I2T R@1 | msrvtt I2T R@3 | msrvtt I2T MdR↓ | msrvtt I2T MnR↓ | "
                      "msrvtt I2T MRR@4 | msrvtt T2I R@1 | msrvtt T2I R@3 | msrvtt T2I MdR↓ | msrvtt T2I MnR↓ | "
                      "msrvtt T2I MRR@4 |")
    assert f"| {expected['t2i_mrr@4']:.3f} |" in md and f"| {expected['i2t_mnr']:.1f} |" in md
    assert "MdR↓, MnR↓: 1-based rank of the best positive (lower is better)" in md


def test_rank_metrics_alone_and_a_clip4clip_table(world, tmp_path):
    assert run("--metrics", "mdr,mnr") == 0
    got = json.loads((tmp_path / "out" / "results.json").read_text())["recall"]["msrvtt"]
    expected, _ = reference(*world, ["mdr", "mnr"])
    assert got == pytest.approx(expected, abs=1e-12)  # no recall keys when no r@K is asked for
    assert run("--metrics", "r@1,r@5,r@10,mdr,mnr", "--tables", "clip4clip-msrvtt") == 0
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    expected, _ = reference(*world, ["r@1", "r@5", "r@10", "mdr", "mnr"])
    values = report["tables"]["clip4clip-msrvtt"]["rows"][0]["values"]
    assert values == pytest.approx([expected[f"{d}_{m}"] for d in ("t2i", "i2t")
                                    for m in ("r1", "r5", "r10", "mdr", "mnr")], abs=1e-12)
    md = (tmp_path / "out" / "results.md").read_text()
    assert "|  | R@1 | R@5 | R@10 | MdR↓ | MnR↓ | R@1 | R@5 | R@10 | MdR↓ | MnR↓ |" in md


def test_without_metrics_the_report_is_as_before(world, tmp_path):
    assert run() == 0
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    assert sorted(report["recall"]["msrvtt"]) == sorted(
        [f"{d}_r{k}" for d in ("i2t", "t2i") for k in (1, 5, 10)] + ["i2t_mean", "t2i_mean", "r_mean"])
    expected, _ = reference(*world, ["r@1", "r@5", "r@10"])
    assert {k: report["recall"]["msrvtt"][k] for k in expected} == pytest.approx(expected, abs=1e-12)
    assert report["metrics"] == ["r@1", "r@5", "r@10"]
    md = (tmp_path / "out" / "results.md").read_text()
    assert "Recall in %.\n" in md
    assert "| config | msrvtt I2T R@1 | msrvtt I2T R@5 | msrvtt T2I R@1 | msrvtt T2I R@5 |" in md


def test_graded_metrics_over_every_positive_equal_the_full_matrix_reference(world, tmp_path):
    items, texts, owner = world
    assert run("--metrics", "map@3,ndcg@4,r@1") == 0
    got = json.loads((tmp_path / "out" / "results.json").read_text())["recall"]["msrvtt"]
    S = torch.nn.functional.normalize(items.double(), dim=1) @ torch.nn.functional.normalize(texts.double(), dim=1).T
    lists = {"i2t": [(S[i], {j for j in range(len(owner)) if owner[j] == i}) for i in range(len(items))],
             "t2i": [(S[:, j], {int(owner[j])}) for j in range(len(owner))]}
    for d, queries in lists.items():
        ap = dcg = 0.0
        for row, positives in queries:
            order = sorted(range(len(row)), key=lambda g: (-float(row[g]), g))
            hits = [r for r, g in enumerate(order[:3]) if g in positives]
            ap += sum((m + 1) / (r + 1) for m, r in enumerate(hits)) / len(positives)
            ideal = sum(1 / math.log2(i + 2) for i in range(min(len(positives), 4)))
            dcg += sum(1 / math.log2(r + 2) for r, g in enumerate(order[:4]) if g in positives) / ideal
        assert got[f"{d}_map@3"] == pytest.approx(ap / len(queries), abs=1e-12)
        assert got[f"{d}_ndcg@4"] == pytest.approx(dcg / len(queries), abs=1e-12)
    md = (tmp_path / "out" / "results.md").read_text()
    assert "msrvtt I2T mAP@3" in md and "msrvtt T2I nDCG@4" in md
