"""``vlr openclip-train --precision amp`` on a GPU: open_clip_train's own loop, mixed precision.

Marked ``gpu``: skips without CUDA; ``benchmarks/gpu_check.sh`` requires it. The
fixtures come from this folder's conftest (a tiny CLIP, 8 coloured squares).
"""

from __future__ import annotations

import math
import re

import pytest
import torch

pytestmark = pytest.mark.gpu

#: the per-loss part of open_clip_train's "Train Epoch" log line: "Name: value (average)"
LOSS = re.compile(r"(\w+): (\S+) \((\S+)\)")


def logged_losses(log_text: str) -> list[float]:
    """Every loss value and running average in open_clip_train's training log lines."""
    values = []
    for line in log_text.splitlines():
        if "Train Epoch:" in line and "Logit Scale:" in line:
            for _, val, avg in LOSS.findall(line.split("Logit Scale:", 1)[1]):
                values += [float(val), float(avg)]
    return values


@pytest.mark.parametrize("precision", ["amp", "amp_bf16"])
def test_amp_steps_with_a_locked_image_tower(precision, tiny_model, tiny_data, tmp_path, restore_logging):
    import open_clip

    from vlr_plugins.integrations.open_clip.train import main

    torch.manual_seed(0)
    before = open_clip.create_model(tiny_model).state_dict()
    init = tmp_path / "init.pt"
    torch.save({"state_dict": before}, init)
    logs = tmp_path / "logs"
    code = main([
        "--train-data", tiny_data["jsonl"], "--model", tiny_model, "--pretrained", str(init),
        # 8 samples / 2 x 2 epochs = 8 steps: room for fp16's dynamic loss scale to skip a few
        "--epochs", "2", "--batch-size", "2", "--workers", "0", "--lr", "1e-3", "--warmup", "1",
        "--device", "cuda", "--precision", precision, "--lock-image",
        "--logs", str(logs), "--name", "run",
        "--vlr-loss", "HardNegativeInfoNCELoss",
        "--vlr-text-views", "{positives: [{field: caption, max_tokens: 77}], "
                            "negatives: [{field: hard_negatives, max_tokens: 77}]}",
    ])
    assert code == 0

    losses = logged_losses((logs / "run" / "out.log").read_text())
    assert losses and all(math.isfinite(x) for x in losses), losses
    ckpt = torch.load(logs / "run" / "checkpoints" / "epoch_2.pt", map_location="cpu", weights_only=True)
    saved = ckpt["state_dict"]
    assert list(saved) == list(before), "a plain open_clip state dict"
    assert all(torch.isfinite(v).all() for v in saved.values() if v.is_floating_point())
    changed = {k for k in before if not torch.equal(before[k], saved[k])}
    assert {"token_embedding.weight", "text_projection"} <= changed
    frozen = [k for k in before if k.startswith("visual.")]
    assert frozen and not changed & set(frozen), "--lock-image: the vision tower stays bit-identical"
    if precision == "amp":  # fp16 autocast: open_clip_train's GradScaler state is saved for resuming
        assert math.isfinite(ckpt["scaler"]["scale"]) and ckpt["scaler"]["scale"] > 0
    else:
        assert "scaler" not in ckpt
    loaded = open_clip.create_model(tiny_model, pretrained=str(logs / "run" / "checkpoints" / "epoch_2.pt"))
    assert all(torch.equal(v, saved[k]) for k, v in loaded.state_dict().items())
