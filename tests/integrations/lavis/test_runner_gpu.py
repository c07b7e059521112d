"""``vlr lavis-train`` on a GPU: LAVIS' own RunnerBase trains a tiny model with AMP, then evaluates.

Marked ``gpu``: skips without CUDA; ``benchmarks/gpu_check.sh`` requires it. LAVIS is
imported inside the test (not at module level), so that a missing LAVIS fails the GPU
check instead of skipping the module. The run is a subprocess, as a user would start it;
its starting weights are written here, so that what changed can be checked.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu


def _long_benchmark(tiny_world) -> dict:
    return {"vlr_retrieval": {
        "reader": "retrieval_jsonl", "name": "long", "max_tokens": 128,
        "build_info": {"annotations": {"test": {"storage": tiny_world["eval_long"]}},
                       "item_embeddings": {"storage": tiny_world["image_embeddings"]}}}}


def test_runner_base_trains_with_amp_and_the_checkpoint_reloads(write_run_config, tiny_world, tiny_model_options,
                                                               tmp_path):
    pytest.importorskip("lavis", reason="LAVIS lives in its own environment (docs/lavis.md)")
    import lavis.tasks as tasks

    from vlr_plugins.integrations.lavis.launcher import prepare_config

    # 48 samples / 8 = 6 steps: room for fp16's dynamic loss scale to skip a few overflowing ones
    run = write_run_config(_long_benchmark(tiny_world), device="cuda", amp=True, max_epoch=1, batch_size_train=8)
    data = dict(train=tiny_world["train"], image_embeddings=tiny_world["image_embeddings"])
    cfg = prepare_config(run, tiny_model_options, **data)
    init_model = tasks.setup_task(cfg).build_model(cfg)
    init = {k: v.clone() for k, v in init_model.state_dict().items()}
    trainable = {n for n, p in init_model.named_parameters() if p.requires_grad}
    frozen = {n for n, p in init_model.named_parameters() if not p.requires_grad}
    assert trainable and frozen
    torch.save({"model": init}, tmp_path / "init.pth")
    options = [o for o in tiny_model_options if not o.startswith("model.finetuned=")]
    options.append(f"model.finetuned={tmp_path / 'init.pth'}")

    proc = subprocess.run(
        [sys.executable, "-m", "vlr_plugins.cli", "lavis-train", "--cfg-path", run, "--train", data["train"],
         "--image-embeddings", data["image_embeddings"], "--options", *options],
        capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    out = Path(re.search(r"^outputs: (.+)$", proc.stdout, re.M).group(1))

    train_logs = [json.loads(line) for line in (out / "log.txt").read_text().splitlines()
                  if line.startswith('{"train_')]
    assert len(train_logs) == 1 and math.isfinite(float(train_logs[0]["train_loss"])), train_logs
    scores = json.loads((out / "evaluate.txt").read_text().splitlines()[-1])  # the test split, after training
    assert 0 <= scores["r_mean"] <= 100

    path = out / "checkpoint_0.pth"
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    scale = ckpt["scaler"]["scale"]  # run.amp: RunnerBase's CUDA GradScaler, saved for resuming
    assert math.isfinite(scale) and scale > 0
    saved = ckpt["model"]
    assert {k for k in saved if k in trainable or k in frozen} == trainable, "the runner saves the trained params"
    assert sum(len(g["params"]) for g in ckpt["optimizer"]["param_groups"]) == len(trainable), \
        "frozen params are never handed to the optimizer"
    assert all(torch.isfinite(v).all() for v in saved.values() if v.is_floating_point())
    changed = {k for k in trainable if not torch.equal(saved[k].cpu(), init[k])}
    assert any(k.startswith("text_proj.") for k in changed)
    assert any(k.startswith("text_encoder.encoder.layer.") and "attention.self" in k for k in changed)

    # the checkpoint loads over the starting weights (model.trained_checkpoint), as lavis-eval does it
    reloaded = tasks.setup_task(cfg).build_model(prepare_config(run, options, checkpoint=str(path), **data))
    for k, v in reloaded.state_dict().items():
        assert torch.equal(v, saved[k].cpu() if k in trainable else init[k]), k
