"""LAVIS runs built and trained as LAVIS' runner does, for the LAVIS suite (its own environment:
lavis is imported inside each function, so this module imports anywhere)."""

from __future__ import annotations

import torch


def build_run(write_run_config, tiny_world, tiny_model_options, *options):
    """``(task, datasets, model)`` of a LAVIS run config with the tiny model options and ``options``."""
    import lavis.tasks as tasks

    from vlr_plugins.integrations.lavis.launcher import prepare_config

    cfg = prepare_config(write_run_config(), [*tiny_model_options, *options],
                         train=tiny_world["train"], image_embeddings=tiny_world["image_embeddings"])
    task = tasks.setup_task(cfg)
    return task, task.build_datasets(cfg), task.build_model(cfg)


def _optimizer(model):
    """AdamW with LAVIS RunnerBase's parameter groups (no decay for biases / norms)."""
    decay = [p for n, p in model.named_parameters() if p.requires_grad and p.ndim >= 2 and "bias" not in n]
    rest = [p for n, p in model.named_parameters() if p.requires_grad and not (p.ndim >= 2 and "bias" not in n)]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": rest, "weight_decay": 0.0}],
                             lr=1e-3)


def train_one_epoch(task, model, dataset):
    """One epoch of LAVIS' own ``task.train_epoch`` (batch 8, AdamW, LAVIS' warm-up cosine schedule)."""
    from lavis.common.registry import registry
    from lavis.datasets.datasets.dataloader_utils import IterLoader
    from torch.utils.data import DataLoader

    loader = IterLoader(DataLoader(dataset, batch_size=8, shuffle=True, collate_fn=dataset.collater,
                                   drop_last=True), use_distributed=False)
    optimizer = _optimizer(model)
    sched = registry.get_lr_scheduler_class("linear_warmup_cosine_lr")(
        optimizer=optimizer, max_epoch=1, min_lr=0.0, init_lr=1e-3, warmup_steps=2, warmup_start_lr=1e-5)
    model.train()
    return task.train_epoch(epoch=0, model=model, data_loader=loader, optimizer=optimizer, lr_scheduler=sched,
                            cuda_enabled=False, log_freq=100)
