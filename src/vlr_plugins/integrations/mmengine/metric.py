"""Retrieval recall as an MMEngine metric, computed by the core engine per split."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch
from mmengine.evaluator import BaseMetric

from vlr_plugins.eval.metric_names import parse_rank_metric
from vlr_plugins.eval.retrieval import retrieval_recall
from vlr_plugins.integrations.mmengine.registry import METRICS

__all__ = ["RetrievalRecallMetric"]


@METRICS.register_module()
class RetrievalRecallMetric(BaseMetric):
    """Recall@k both directions for every split the evaluation dataset holds.

    Consumes ``TextOnlyRetrievalModel(mode='predict')`` outputs; keys read
    ``{split}/i2t_r1`` ... ``{split}/r_mean`` (percent). ``rank_metrics`` adds the engine's
    rank metrics (``mdr``, ``mnr``, ``mrr@K``, ``map@K``, ``ndcg@K``) as ``{split}/i2t_mdr``,
    ``{split}/t2i_map@10``, ...; names are checked when the metric is built.
    """

    default_prefix = ""

    def __init__(self, ks: Sequence[int] = (1, 5, 10), collect_device: str = "cpu",
                 prefix: str | None = None, rank_metrics: Sequence[str] = ()) -> None:
        super().__init__(collect_device=collect_device, prefix=prefix)
        self.ks = tuple(ks)
        self.rank_metrics = tuple(rank_metrics)
        for name in self.rank_metrics:
            parse_rank_metric(name)

    def process(self, data_batch, data_samples: Sequence[dict]) -> None:
        self.results.extend(data_samples)

    def compute_metrics(self, results: list) -> dict[str, float]:
        by_split: dict[str, list[dict]] = defaultdict(list)
        for r in results:
            by_split[r["split"]].append(r)
        out: dict[str, float] = {}
        for split, rows in sorted(by_split.items()):
            items = torch.stack([r["image_emb"] for r in rows])
            texts = torch.cat([r["text_emb"] for r in rows])
            owner = torch.cat([torch.full((len(r["text_emb"]),), i, dtype=torch.long)
                               for i, r in enumerate(rows)])
            for k, v in retrieval_recall(items, texts, owner, ks=self.ks, rank_metrics=self.rank_metrics).items():
                out[f"{split}/{k}"] = v
        return out
