"""MVC pretraining's GPU-only switches through ``vlr train``: mixed precision (``train.amp`` with
``train.amp_dtype`` float16 / bfloat16) and gradient checkpointing (``train.grad_checkpointing``:
the video tower's blocks and the BERT layers recomputed in the backward pass).

Marked ``gpu``: skips without CUDA; ``benchmarks/gpu_check.sh`` requires it. Packages are
imported inside the tests, so that a missing one fails the GPU check instead of skipping.
"""

from __future__ import annotations

import math

import pytest
import torch
from _mvc_world import mvc_world, tiny_sets

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype, checkpointing", [("float16", False), ("bfloat16", True)])
def test_amp_and_grad_checkpointing_train_both_towers(dtype, checkpointing, tmp_path):
    from mmengine.config import Config
    from mmengine.optim import AmpOptimWrapper
    from mmengine.runner import Runner

    from vlr_plugins.cli import main

    world = mvc_world()
    sets = [*tiny_sets(world, batch_size=2), "train.amp=true", f"train.amp_dtype={dtype}",
            f"train.grad_checkpointing={str(checkpointing).lower()}"]
    dumped = tmp_path / "cfg.py"
    assert main(["train", "mvc/mvc_b", "--train", world["train"], "--work-dir", str(tmp_path / "run"),
                 "--dump-config", str(dumped), "--set", *sets]) == 0
    cfg = Config.fromfile(str(dumped))
    assert cfg.optim_wrapper.type == "AmpOptimWrapper" and cfg.model.grad_checkpointing is checkpointing
    runner = Runner.from_cfg(cfg)
    model = runner.model
    assert next(model.parameters()).device.type == "cuda"
    assert bool(model.video_encoder.grad_checkpointing) is checkpointing
    assert model.text_encoder.bert.is_gradient_checkpointing is checkpointing
    before = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    runner.train()

    assert isinstance(runner.optim_wrapper, AmpOptimWrapper)
    assert runner.optim_wrapper.cast_dtype == getattr(torch, dtype)
    losses = runner.message_hub.get_scalar("train/loss").data[0]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses), losses  # 8 clips in batches of 2
    after = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    assert all(torch.isfinite(v).all() for v in after.values() if v.is_floating_point())
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert any(k.startswith("video_encoder.blocks.") for k in changed)
    assert any(k.startswith("text_encoder.") for k in changed) and "match_head.weight" in changed
    ckpt = torch.load(tmp_path / "run" / "epoch_1.pth", map_location="cpu", weights_only=True)
    assert ckpt["meta"]["vlr_video_encoder"]["type"] == "SpaceTimeViT"
