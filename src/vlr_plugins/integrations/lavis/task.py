"""LAVIS task ``vlr_retrieval``: the package's streaming recall instead of the full score matrix.

LAVIS' ``retrieval`` task fills a (images x texts) score matrix on every rank, tokenises
every text at 35 tokens and ranks with ``np.argsort``. This task encodes each benchmark's
texts at its own budget, ranks with ``vlr_plugins.eval.retrieval_recall`` (tiled, exact,
both directions) and, with ``rerank: true`` in ``run``, re-scores each query's top
``k_test`` with BLIP's ITM head as LAVIS does (ITM logit + similarity). Metrics keep
LAVIS' names (``txt_r1`` = image-to-text R@1 ... ``agg_metrics``), so the runner's
best-checkpoint logic works unchanged; with several benchmarks each is reported as
``<name>/txt_r1`` ... and ``agg_metrics`` is their mean.

Evaluation runs on the main process (the others return ``None``, as LAVIS' task does
for reporting); training is LAVIS' ``train_step`` (the model returns the loss).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from lavis.common.dist_utils import is_main_process
from lavis.common.registry import registry
from lavis.tasks.retrieval import RetrievalTask
from omegaconf import OmegaConf
from torch.utils.data import DataLoader
from tqdm import tqdm

from vlr_plugins.errors import ConfigError
from vlr_plugins.eval.rerank import rerank_pairs
from vlr_plugins.eval.retrieval import retrieval_recall
from vlr_plugins.integrations.lavis._registry import register
from vlr_plugins.integrations.lavis.datasets import (
    VlrParagraphBuilder,
    VlrRetrievalEvalDataset,
    VlrRetrievalSuite,
    config_file,
)
from vlr_plugins.integrations.lavis.model import DEFAULT_LOSS
from vlr_plugins.recipe import check_loss_against_views
from vlr_plugins.text.length_blocks import check_length_blocks

__all__ = ["VlrRetrievalTask", "lavis_metrics"]

log = logging.getLogger(__name__)

SUITE = "vlr_benchmarks"


def lavis_metrics(m: Mapping[str, float]) -> dict[str, float]:
    """The engine's ``i2t_r{k}`` / ``t2i_r{k}`` under LAVIS' retrieval names."""
    out = {f"txt_r{k}": float(m[f"i2t_r{k}"]) for k in (1, 5, 10)}
    out |= {f"img_r{k}": float(m[f"t2i_r{k}"]) for k in (1, 5, 10)}
    out["txt_r_mean"] = (out["txt_r1"] + out["txt_r5"] + out["txt_r10"]) / 3
    out["img_r_mean"] = (out["img_r1"] + out["img_r5"] + out["img_r10"]) / 3
    out["r_mean"] = (out["txt_r_mean"] + out["img_r_mean"]) / 2
    out["agg_metrics"] = out["txt_r_mean"]  # LAVIS' choice for retrieval
    return out


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return getattr(model, "module", model)


@register("task", "vlr_retrieval")
class VlrRetrievalTask(RetrievalTask):
    """``run`` keys read here: ``k_test`` (default 256), ``rerank`` (default false),
    ``batch_size_eval``, ``num_workers``."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.k_test = int(cfg.get("k_test", 256))
        self.rerank = bool(cfg.get("rerank", False))
        self.batch_size = int(cfg.get("batch_size_eval", 256))
        self.num_workers = int(cfg.get("num_workers", 0))
        self.progress = bool(cfg.get("progress", True))

    # ------------------------------------------------------------------ building

    def build_datasets(self, cfg) -> dict[str, dict[str, Any]]:
        """LAVIS' builders, then: the recipe's loss checked against the training views,
        and each evaluation split's benchmarks gathered into one suite (LAVIS takes
        one dataset per evaluation split)."""
        self._check_loss_views(cfg)  # before any file is read
        datasets = super().build_datasets(cfg)
        suites: dict[str, list[VlrRetrievalEvalDataset]] = {}
        for name in list(datasets):
            for split in list(datasets[name]):
                if isinstance(datasets[name][split], VlrRetrievalEvalDataset):
                    suites.setdefault(split, []).append(datasets[name].pop(split))
            if not datasets[name]:
                del datasets[name]
        for split, benches in suites.items():
            others = [n for n, d in datasets.items() if split in d]
            if others:
                raise ConfigError(f"{config_file()}: split {split!r} has LAVIS datasets ({', '.join(others)}) "
                                  f"and vlr benchmarks; LAVIS evaluates one dataset per split")
            self._check_rerank(benches)  # before training, not after it
            names = [b.name for b in benches]
            if len(set(names)) != len(names):
                raise ConfigError(f"{config_file()}: split {split!r} has two benchmarks named alike "
                                  f"({names}); set 'name:' on the builders")
        if suites:
            datasets[SUITE] = {split: VlrRetrievalSuite(b) for split, b in suites.items()}
        return datasets

    @staticmethod
    def _check_loss_views(cfg) -> None:
        model_cfg = cfg.model_cfg
        if model_cfg.get("arch") != "blip_retrieval_textonly":
            return
        blocks = model_cfg.get("length_blocks", 1)
        try:
            check_length_blocks(config_file(), blocks, "model.length_blocks")
        except ValueError as e:
            raise ConfigError(str(e)) from None
        loss = model_cfg.get("loss", None)
        loss = OmegaConf.to_container(loss, resolve=True) if loss is not None else DEFAULT_LOSS
        for name, dcfg in cfg.datasets_cfg.items():
            builder = registry.get_builder_class(name)
            if builder is not None and issubclass(builder, VlrParagraphBuilder):
                check_loss_against_views(loss, builder(dcfg).views, config_file(), loss_key="model.loss",
                                         views_key=f"datasets.{name}.text_views")

    # ------------------------------------------------------------------ evaluation

    def evaluation(self, model, data_loader, **kwargs):
        dataset = data_loader.dataset
        if not isinstance(dataset, VlrRetrievalSuite):
            return super().evaluation(model, data_loader, **kwargs)  # LAVIS' own datasets
        if not is_main_process():
            return None
        result = self.evaluate_suite(_unwrap(model), dataset)
        log.info(result)
        out_dir = registry.get_path("output_dir")
        if out_dir:
            with open(os.path.join(out_dir, "evaluate.txt"), "a") as f:
                f.write(json.dumps(result) + "\n")
        return result

    @torch.no_grad()
    def evaluate_suite(self, model, suite: VlrRetrievalSuite) -> dict[str, float]:
        was_training = model.training
        model.eval()
        try:
            per_bench = self._score_suite(model, suite)
        finally:
            model.train(was_training)
        if len(per_bench) == 1:
            return next(iter(per_bench.values()))
        out: dict[str, float] = {}
        for name, metrics in per_bench.items():
            out |= {f"{name}/{k}": v for k, v in metrics.items()}
        for key in ("r_mean", "agg_metrics"):
            out[key] = sum(m[key] for m in per_bench.values()) / len(per_bench)
        return out

    def _score_suite(self, model, suite: VlrRetrievalSuite) -> dict[str, dict[str, float]]:
        need_images = [b.with_images and (b.item_embeddings is None or self.rerank) for b in suite.benchmarks]
        self._check_rerank(suite.benchmarks)
        image_emb, image_feats = self._encode_images(model, suite, need_images)
        out = {}
        for b, bench in enumerate(suite.benchmarks):
            items = bench.item_embeddings_tensor() if bench.item_embeddings else image_emb[b]
            texts = self._encode_texts(model, bench.text, bench.max_tokens, bench.name)
            rerank = None
            if self.rerank:
                rerank = self._itm_rerank(model, bench, items, texts, image_feats[b])
            m = retrieval_recall(items.to(model.device), texts, bench.text_owner.to(model.device),
                                 ks=(1, 5, 10), rerank=rerank, rerank_k=self.k_test, device=model.device)
            out[bench.name] = self.metrics(m)
        return out

    def _check_rerank(self, benches: Sequence[VlrRetrievalEvalDataset]) -> None:
        missing = [b.name for b in benches if not b.with_images]
        if self.rerank and missing:
            raise ConfigError(f"{config_file()}: run.rerank needs the images of {', '.join(missing)} "
                              f"(build_info.images.storage): ITM cross-attends to the ViT's tokens")

    @staticmethod
    def metrics(engine_result: Mapping[str, float]) -> dict[str, float]:
        return lavis_metrics(engine_result)

    def _encode_texts(self, model, texts: Sequence[str], budget: int, name: str) -> torch.Tensor:
        chunks = range(0, len(texts), self.batch_size)
        bar = tqdm(chunks, desc=f"encode {name} texts", disable=not self.progress)
        return torch.cat([model.encode_text(texts[i: i + self.batch_size], budget) for i in bar])

    def _encode_images(self, model, suite: VlrRetrievalSuite, need: list[bool]):
        """Per benchmark that needs them: image embeddings and, for re-ranking, the ViT
        token states (kept on the CPU, as LAVIS does)."""
        emb: dict[int, torch.Tensor] = {}
        feats: dict[int, torch.Tensor] = {}
        for b, bench in enumerate(suite.benchmarks):
            if not need[b]:
                continue
            loader = DataLoader(bench, batch_size=self.batch_size, num_workers=self.num_workers,
                                collate_fn=bench.collater, shuffle=False)
            e_parts, f_parts = [], []
            for batch in tqdm(loader, desc=f"encode {bench.name} images", disable=not self.progress):
                e, f = model.encode_image(batch["image"].to(model.device), return_features=True)
                e_parts.append(e)
                if self.rerank:
                    f_parts.append(f.cpu())
            emb[b] = torch.cat(e_parts)
            if self.rerank:
                feats[b] = torch.cat(f_parts)
        return emb, feats

    def _itm_rerank(self, model, bench: VlrRetrievalEvalDataset, items: torch.Tensor, texts: torch.Tensor,
                    feats: torch.Tensor):
        """The engine's re-ranking hook: BLIP's ITM logit + the first-stage similarity."""
        device = model.device
        items, texts = items.to(device), texts.to(device)

        def score(query: torch.Tensor, cand: torch.Tensor, direction: str) -> torch.Tensor:
            q, k = cand.shape
            img, txt = rerank_pairs(query, cand, direction)
            out = torch.empty(q * k, device=device)
            for lo in range(0, q * k, self.batch_size):
                t, i = txt[lo: lo + self.batch_size], img[lo: lo + self.batch_size]
                ids, mask = model.tokenize([bench.text[j] for j in t.tolist()], bench.max_tokens)
                itm = model.itm_scores(ids, mask, feats[i.cpu()].to(device))
                out[lo: lo + len(t)] = itm + (items[i] * texts[t]).sum(-1)
            return out.view(q, k)

        return score
