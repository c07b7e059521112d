"""RetrievalRecallMetric: the engine's recall and rank metrics per split, from MMEngine's
evaluator inputs (one record per item: its embedding, its texts' embeddings, its split)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("mmengine")

from vlr_plugins.eval import retrieval_recall  # noqa: E402
from vlr_plugins.integrations.mmengine.metric import RetrievalRecallMetric  # noqa: E402


def records(seed: int, split: str, n: int = 12):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        image = torch.randn(8, generator=g)
        texts = image + 1.5 * torch.randn(int(torch.randint(1, 4, (1,), generator=g)), 8, generator=g)
        out.append({"image_emb": image, "text_emb": texts, "split": split})
    return out


def test_every_split_gets_recall_and_the_rank_metrics_the_engine_computes():
    metric = RetrievalRecallMetric(ks=(1, 5), rank_metrics=("mdr", "mrr@5", "map@5", "ndcg@5"))
    results = records(0, "coco") + records(1, "flickr")
    metric.process(None, results)
    got = metric.compute_metrics(metric.results)
    for split in ("coco", "flickr"):
        rows = [r for r in results if r["split"] == split]
        owner = torch.cat([torch.full((len(r["text_emb"]),), i) for i, r in enumerate(rows)])
        want = retrieval_recall(torch.stack([r["image_emb"] for r in rows]), torch.cat([r["text_emb"] for r in rows]),
                                owner, ks=(1, 5), rank_metrics=("mdr", "mrr@5", "map@5", "ndcg@5"))
        assert {k.split("/", 1)[1]: v for k, v in got.items() if k.startswith(f"{split}/")} == want
        assert f"{split}/i2t_map@5" in got and f"{split}/t2i_mdr" in got


def test_an_unknown_rank_metric_is_refused_when_the_metric_is_built():
    with pytest.raises(ValueError, match="unknown rank metric 'recall@5'"):
        RetrievalRecallMetric(rank_metrics=("recall@5",))
