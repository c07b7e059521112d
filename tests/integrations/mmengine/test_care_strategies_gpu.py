"""CaRe stage II on FlexibleRunner's FSDP and DeepSpeed strategies on CUDA (NCCL), one process
(world size 1: NCCL takes one GPU per rank), LoRA on the tiny random Qwen2-VL.

Marked ``gpu``: skips without CUDA; ``benchmarks/gpu_check.sh`` requires it (deepspeed is one
of the wheels it carries). The CPU runs of both strategies, on two gloo processes, are in
test_care_cpu_distributed.py; these check what only a GPU shows: MMEngine's own CUDA path of
each strategy (``init_dist`` with ``set_device``, FSDP's ``device_id=LOCAL_RANK``), and bf16.

- FSDP in fp32 ends where the one-process ``Runner`` run on the same GPU ends, within 1e-5
  (one rank: FSDP's flat parameter changes the order of nothing but the optimizer's loop);
- FSDP with the recipe's ``AmpOptimWrapper`` (bf16 autocast) and DeepSpeed ZeRO-2 with the
  recipe's bf16 run to the end with finite losses, the adapters trained (LoRA's B starts at
  zero) and a checkpoint ``torch.load(weights_only=True)`` reads.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

TRIPLETS, BATCH, EPOCHS, TOL = 8, 4, 2, 1e-5
SRC = str(Path(__file__).resolve().parents[3] / "src")
SCHEDULE = ("param_scheduler=[{type: LinearLR, start_factor: 1.0e-6, end_factor: 1.0, by_epoch: true, begin: 0, "
            "end: 1, convert_to_iter_based: true}, {type: LinearLR, start_factor: 1.0, end_factor: 0.0, "
            "by_epoch: true, begin: 1, end: 2, convert_to_iter_based: true}]")
FP32 = "optim_wrapper={type: OptimWrapper, optimizer: {type: AdamW, lr: 0.001, weight_decay: 0.0}}"
FSDP = ["runner_type=FlexibleRunner", "strategy={type: FSDPStrategy, state_dict_cfg: full}"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from _tiny_mllm import save_tiny_qwen2vl, write_nli_csv

    tmp = tmp_path_factory.mktemp("care-gpu")
    return {"tmp": tmp, "folder": str(save_tiny_qwen2vl(tmp / "tiny", seed=1)),
            "nli": write_nli_csv(tmp / "nli.csv", rows=TRIPLETS)}


def _train(world, work: Path, recipe: str, *extra: str, torchrun: bool = True) -> str:
    """``vlr train RECIPE`` with LoRA on the GPU, in a fresh interpreter (under ``torchrun`` with
    one process for a FlexibleRunner strategy, which starts NCCL); its stdout + stderr."""
    folder = world["folder"]
    argv = [sys.executable, "-m", "vlr_plugins.cli", "train", recipe, "--train", world["nli"], "--work-dir", str(work),
            "--set", f"model.embedder.pretrained={folder}", f"train_dataloader.dataset.tokenizer={folder}",
            f"train_dataloader.batch_size={BATCH}", "train_dataloader.num_workers=0",
            "train_dataloader.persistent_workers=false", f"train_cfg.max_epochs={EPOCHS}",
            "default_hooks.checkpoint.max_keep_ckpts=2", "model.finetune=lora",
            "model.lora={r: 4, lora_alpha: 8, lora_dropout: 0.0}", SCHEDULE, *extra]
    if torchrun:
        argv[1:1] = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"]
        argv.extend(["--launcher", "pytorch"])
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH"))
                                                                          if p))
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-6000:]
    return out.stdout + out.stderr


def _losses(work: Path) -> list[float]:
    import json

    (scalars,) = work.glob("*/vis_data/scalars.json")
    return [json.loads(line)["loss"] for line in scalars.read_text().splitlines() if '"loss"' in line]


def _trained(weights: dict) -> None:
    import torch

    adapters = {k: v for k, v in weights.items() if "lora_B" in k}
    assert adapters and any(v.float().abs().max() > 0 for v in adapters.values())  # B starts at zero
    assert all(torch.isfinite(v.float()).all() for v in weights.values())


def test_fsdp_in_fp32_ends_where_the_runner_ends(world):
    import torch

    runner, fsdp = world["tmp"] / "runner", world["tmp"] / "fsdp32"
    _train(world, runner, "care/stage2_paper", FP32, torchrun=False)
    _train(world, fsdp, "care/stage2_paper", FP32, *FSDP)
    one = torch.load(runner / "epoch_2.pth", map_location="cpu", weights_only=True)["state_dict"]
    got = torch.load(fsdp / "epoch_2.pth", map_location="cpu", weights_only=True)["state_dict"]
    assert got.keys() == one.keys()
    _trained(got)
    assert max((got[k].double() - one[k].double()).abs().max().item() for k in one) < TOL
    assert _losses(fsdp) == pytest.approx(_losses(runner), abs=TOL)


def test_fsdp_with_the_recipes_bf16_autocast_trains(world):
    import torch

    work = world["tmp"] / "fsdp-bf16"
    _train(world, work, "care/stage2_paper", "optim_wrapper.optimizer.lr=0.001", *FSDP)
    losses = _losses(work)
    assert len(losses) == EPOCHS * TRIPLETS // BATCH and all(math.isfinite(x) for x in losses)
    _trained(torch.load(work / "epoch_2.pth", map_location="cpu", weights_only=True)["state_dict"])


def test_deepspeed_zero2_with_the_recipes_bf16_trains(world):
    import torch

    pytest.importorskip("deepspeed")
    work = world["tmp"] / "deepspeed"
    log = _train(world, work, "care/stage2_released_deepspeed", "strategy.gradient_accumulation_steps=1",
                 "optim_wrapper.optimizer.lr=0.001", "strategy.zero_optimization.reduce_bucket_size=500000",
                 "strategy.zero_optimization.allgather_bucket_size=500000")
    assert "DeepSpeed ZeRO-2" in log
    losses = _losses(work)
    assert len(losses) == EPOCHS * TRIPLETS // BATCH and all(math.isfinite(x) for x in losses)
    states = torch.load(work / "epoch_2.pth" / "mp_rank_00_model_states.pt", map_location="cpu", weights_only=True)
    _trained(states["module"])
    assert states["meta"]["vlr_schedule"] == {"max_epochs": EPOCHS}
