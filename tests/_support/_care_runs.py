"""What the tests of ``vlr train care/...`` on two CPU processes (torchrun, gloo) share: the
tiny Qwen2-VL's LoRA run of ``care/stage2_paper`` and its strategy variants, one process
against two (tests only; test_care_cpu_distributed.py, test_care_cpu_sharded.py and
test_care_cpu_clipping.py say what each compares and why the tolerances hold)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _tiny_mllm import save_tiny_qwen2vl, write_nli_csv
from _torchrun import load_checkpoint, logged_rows, run_vlr_processes

TOL = 1e-5
TRIPLETS, GLOBAL_BATCH, EPOCHS = 20, 4, 2


#: ``--set`` values that train on FlexibleRunner with MMEngine's FSDPStrategy
FSDP = ["runner_type=FlexibleRunner", "strategy={type: FSDPStrategy, state_dict_cfg: full}"]


#: FSDP's ``state_dict_cfg: local`` (each rank saves its shards) and a transformer layer wrap
#: policy written as a config writes it: the decoder layer's class by name
LAYERS = ("{type: torch.distributed.fsdp.wrap.transformer_auto_wrap_policy, "
          "transformer_layer_cls: [Qwen2VLDecoderLayer]}")
FSDP_LOCAL_LAYERS = ["runner_type=FlexibleRunner",
                     "strategy={type: FSDPStrategy, state_dict_cfg: local, model_wrapper: {auto_wrap_policy: "
                     + LAYERS + "}}"]
#: FSDP's size-based policy, as MMEngine's docs write it (sharded checkpoints show the units it made)
FSDP_LOCAL_SIZE = ["runner_type=FlexibleRunner",
                   "strategy={type: FSDPStrategy, state_dict_cfg: local, model_wrapper: {auto_wrap_policy: "
                   "{type: torch.distributed.fsdp.wrap.size_based_auto_wrap_policy, min_num_params: 4000}}}"]
#: bf16 under FSDP: its mixed precision policy (bf16 compute and gradient reduction, fp32 weights
#: and AdamW), with the layer policy, one full checkpoint
FSDP_BF16 = ["runner_type=FlexibleRunner",
             "strategy={type: FSDPStrategy, state_dict_cfg: full, model_wrapper: {auto_wrap_policy: " + LAYERS
             + ", mixed_precision: {param_dtype: bfloat16, reduce_dtype: bfloat16, buffer_dtype: bfloat16}}}"]

#: ``--set`` values that make ``care/stage2_released_deepspeed`` the one-process run of stage2_paper
DEEPSPEED = ["model.embedder.prompt=care", "train_dataloader.dataset.prompt=care",
             "param_scheduler=[{type: LinearLR, start_factor: 1.0e-6, end_factor: 1.0, by_epoch: true, begin: 0, "
             "end: 0.4, convert_to_iter_based: true}, {type: LinearLR, start_factor: 1.0, end_factor: 0.0, "
             "by_epoch: true, begin: 0.4, end: 2, convert_to_iter_based: true}]",
             "strategy.bf16={enabled: false}", "strategy.gradient_clipping=0.0", "strategy.gradient_accumulation_steps=1",
             "strategy.zero_optimization.reduce_bucket_size=500000",
             "strategy.zero_optimization.allgather_bucket_size=500000",
             "optim_wrapper.optimizer={type: AdamW, lr: 0.001, weight_decay: 0.0}"]
#: the same in bf16, as the recipe trains (DeepSpeed's bf16: bf16 weights and compute, fp32 AdamW)
DEEPSPEED_BF16 = [*DEEPSPEED, "strategy.bf16={enabled: true}"]
#: where the bf16 runs log the fp32 run's loss (about 2.08): 1e-2, 0.5% of it, two roundings of
#: bf16's 8-bit mantissa (2^-8 = 0.4%) -- seen 6e-4 (FSDP) and 4e-4 (DeepSpeed)
BF16_LOSS_TOL = 1e-2


def train(folder: str, nli: str, work: Path, *, processes: int, resume: bool = False, fails: bool = False,
           extra: tuple[str, ...] = (), recipe: str = "care/stage2_paper") -> str:
    """``vlr train RECIPE`` (stage2_paper) with LoRA into ``work`` in a fresh interpreter with
    no GPU visible, under ``torchrun --standalone`` for several processes; ``extra``: more
    ``--set`` values, after the shared ones."""
    optimizer = [] if recipe.endswith("deepspeed") else [
        "optim_wrapper={type: OptimWrapper, optimizer: {type: AdamW, lr: 0.001, weight_decay: 0.0}}"]
    argv = ["train", recipe, "--train", nli,
            "--work-dir", str(work), *(["--resume"] if resume else []), "--set", f"model.embedder.pretrained={folder}",
            f"train_dataloader.dataset.tokenizer={folder}", f"train_dataloader.batch_size={GLOBAL_BATCH // processes}",
            "train_dataloader.num_workers=0", "train_dataloader.persistent_workers=false",
            f"train_cfg.max_epochs={EPOCHS}", "default_hooks.checkpoint.max_keep_ckpts=2",
            *optimizer, "env_cfg.dist_cfg.backend=gloo", "model.finetune=lora", "model.lora={r: 4, lora_alpha: 8, lora_dropout: 0.0}",
            *extra]
    return run_vlr_processes(argv, processes, fails=fails)


def weights(path: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path)["state_dict"]


def losses(where: Path) -> list[float]:
    """The loss logged at each step: of a run's ``scalars.json``, or of a work dir's only run."""
    return [row["loss"] for row in logged_rows(where)]


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], keys) -> float:
    return max((a[k].double() - b[k].double()).abs().max().item() for k in keys)


STEPS = TRIPLETS // GLOBAL_BATCH


def killed_and_resumed(runs, name: str, extra: list[str], *, recipe: str = "care/stage2_paper",
                        folder: bool = False) -> tuple[Path, str, list[float], list[float]]:
    """A two-process run in ``runs["tmp"] / name`` killed at its epoch-2 checkpoint, which
    cannot be written (a folder stands where a file checkpoint goes; a file where a folder goes,
    ``folder``: DeepSpeed's, FSDP's sharded one), then resumed with ``--resume`` from epoch 1's:
    its work dir, the killed run's output, and the losses logged by the killed run (both epochs:
    it trained them before it died) and by the resumed one."""
    work = runs["tmp"] / name
    work.mkdir()
    blocked = work / "epoch_2.pth"
    blocked.touch() if folder else blocked.mkdir()
    log = train(runs["folder"], runs["nli"], work, processes=2, fails=True, extra=extra, recipe=recipe)
    assert "epoch_2.pth" in log
    assert (work / "last_checkpoint").read_text().strip() == str(work / "epoch_1.pth")
    blocked.unlink() if folder else blocked.rmdir()
    train(runs["folder"], runs["nli"], work, processes=2, resume=True, extra=extra, recipe=recipe)
    died, resumed = sorted(work.glob("*/vis_data/scalars.json"))  # the killed run's log, then the resumed's
    return work, log, losses(died), losses(resumed)


def require_deepspeed() -> None:
    from importlib.metadata import version

    pytest.importorskip("deepspeed", reason="deepspeed is not installed (pip install 'vlr-plugins[deepspeed]')")
    from packaging.version import Version

    if not Version("0.19.0") <= Version(version("deepspeed")) < Version("0.19.7"):
        pytest.skip(f"deepspeed {version('deepspeed')}: MMEngine 0.10.7 drives 0.19.0 to 0.19.6 (docs/scaling.md)")


def care_runs(tmp: Path, *, two_processes: bool = True) -> dict:
    """The tiny Qwen2-VL and NLI triplets in ``tmp``, trained one process (``one``) and, with
    ``two_processes``, two (``two``; ``stdout``: the two-process run's output)."""
    folder = str(save_tiny_qwen2vl(tmp / "tiny_qwen2vl", seed=1))
    nli = write_nli_csv(tmp / "nli.csv", rows=TRIPLETS)
    runs = {"tmp": tmp, "folder": folder, "nli": nli, "one": tmp / "one"}
    train(folder, nli, runs["one"], processes=1)
    if two_processes:
        runs["two"] = tmp / "two"
        runs["stdout"] = train(folder, nli, runs["two"], processes=2)
    return runs
