"""Mixed-precision training on a GPU through MMEngine's Runner (``train.amp`` -> AmpOptimWrapper).

Marked ``gpu``: skips without CUDA; ``benchmarks/gpu_check.sh`` requires it. The packages
are imported inside the test, so that a missing one fails the GPU check instead of
skipping the module.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_amp_steps_train_the_text_side_and_the_checkpoint_reloads(dtype, tiny_world, tiny_encoder_cfg, tmp_path):
    pytest.importorskip("mmengine")
    from mmengine.config import Config
    from mmengine.optim import AmpOptimWrapper
    from mmengine.runner import Runner

    from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config
    from vlr_plugins.recipe import load_recipe
    from vlr_plugins.specs import load_text_encoder

    recipe = load_recipe("paragraph/c5", {
        "model": tiny_encoder_cfg,
        "data": {"train": tiny_world["train"], "image_embeddings": tiny_world["image_embeddings"]},
        # 48 samples / 8 = 6 steps: enough for fp16's dynamic loss scale to skip a few overflowing ones
        "train": {"batch_size": 8, "epochs": 1, "lr": 1e-3, "warmup_steps": 1, "num_workers": 0,
                  "log_interval": 1, "amp": True},
    })
    cfg = Config(recipe_to_mmengine_config(recipe, str(tmp_path), log_level="WARNING"))
    assert cfg.optim_wrapper.type == "AmpOptimWrapper"
    cfg.optim_wrapper.dtype = dtype
    runner = Runner.from_cfg(cfg)
    assert next(runner.model.parameters()).device.type == "cuda"
    before = {k: v.detach().cpu().clone() for k, v in runner.model.state_dict().items()}
    runner.train()

    assert isinstance(runner.optim_wrapper, AmpOptimWrapper)
    assert runner.optim_wrapper.cast_dtype == getattr(torch, dtype)
    losses = runner.message_hub.get_scalar("train/loss").data[0]
    assert len(losses) == 6 and all(math.isfinite(x) for x in losses), losses
    after = {k: v.detach().cpu() for k, v in runner.model.state_dict().items()}
    assert all(torch.isfinite(v).all() for v in after.values() if v.is_floating_point())
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert any(k.startswith("text_encoder.text_encoder.") for k in changed)
    assert any(k.startswith("text_encoder.text_proj.") for k in changed)
    assert all(k.startswith("text_encoder.") for k in changed), "only the text side may train"

    path = tmp_path / "epoch_1.pth"
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    scaler = ckpt["optimizer"]["loss_scaler"]  # AmpOptimWrapper's dynamic loss scale, saved and resumable
    assert math.isfinite(scaler["scale"]) and scaler["scale"] > 0
    for k, v in after.items():
        assert torch.equal(ckpt["state_dict"][k], v), k
    rebuilt = load_text_encoder(path).eval()
    trained = copy.deepcopy(runner.model.text_encoder).float().cpu().eval()
    ids = torch.randint(5, 40, (3, 9))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        assert torch.allclose(rebuilt(ids, mask), trained(ids, mask), atol=1e-6)
