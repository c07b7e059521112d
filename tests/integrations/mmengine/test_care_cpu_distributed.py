"""``vlr train care/stage2_paper`` with LoRA under ``torchrun --nproc_per_node 2`` on CPU
processes (gloo), on the tiny random Qwen2-VL, against one process with the same global batch
and seed.

The CaRe recipes are MMEngine configs, where ``train_dataloader.batch_size`` is the batch
*per process*: one process takes 4 triplets a step, each of two processes 2, so both runs
step on global batches of 4. ``DefaultSampler`` deals one seeded permutation of the 20
triplets (a multiple of the world size) round-robin, so global batch ``i`` holds the same
triplets in both runs, in another order, which the loss does not see: ``SupervisedSimCSELoss``
gathers every rank's anchors, positives and hard negatives with gradient
(``gather_rows_with_grad``) and sums over the global batch. LoRA's dropout is off (masks are
drawn per rank); the tiny Qwen2-VL has no attention dropout; the recipe's gradient
checkpointing stays on. The tolerance, 1e-5 on every weight and on the loss logged at each
step, covers the order of float additions (the batch's order, the gathered sums, DDP's
averaged gradients) over ten AdamW steps at lr 1e-3 (seen: 2e-6, against a movement of the
adapters of 1e-3 over the last epoch). AdamW normalises each step, so an entry whose
gradient is near zero moves by about lr in a direction float noise may flip: at lr 1e-2 the
runs differ by 4e-5. No parameter here has a zero true gradient (the LLM's own biases are
frozen, only the adapters train).

The resume case: a two-process run dies at its epoch-2 checkpoint (a folder stands where
rank 0 would write it; torchrun stops both ranks), and ``--resume`` under torchrun
continues from epoch 1's checkpoint to where the uninterrupted two-process run ends.

``loss.cache_chunk`` (gradient caching) is not an option of ``SupervisedSimCSELoss``, the
CaRe stage II loss, so these runs are without it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("mmengine")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from _torchrun import load_checkpoint, logged_rows, require_torchrun, run_vlr_processes  # noqa: E402

require_torchrun()

from _tiny_mllm import save_tiny_qwen2vl, write_nli_csv  # noqa: E402

TOL = 1e-5
TRIPLETS, GLOBAL_BATCH, EPOCHS = 20, 4, 2


def _train(folder: str, nli: str, work: Path, *, processes: int, resume: bool = False, fails: bool = False) -> str:
    """``vlr train care/stage2_paper`` with LoRA into ``work`` in a fresh interpreter with no
    GPU visible, under ``torchrun --standalone`` for several processes."""
    argv = ["train", "care/stage2_paper", "--train", nli,
            "--work-dir", str(work), *(["--resume"] if resume else []), "--set", f"model.embedder.pretrained={folder}",
            f"train_dataloader.dataset.tokenizer={folder}", f"train_dataloader.batch_size={GLOBAL_BATCH // processes}",
            "train_dataloader.num_workers=0", "train_dataloader.persistent_workers=false",
            f"train_cfg.max_epochs={EPOCHS}", "default_hooks.checkpoint.max_keep_ckpts=2",
            "optim_wrapper={type: OptimWrapper, optimizer: {type: AdamW, lr: 0.001, weight_decay: 0.0}}",
            "env_cfg.dist_cfg.backend=gloo", "model.finetune=lora", "model.lora={r: 4, lora_alpha: 8, lora_dropout: 0.0}"]
    return run_vlr_processes(argv, processes, fails=fails)


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path)["state_dict"]


def _losses(where: Path) -> list[float]:
    """The loss logged at each step: of a run's ``scalars.json``, or of a work dir's only run."""
    return [row["loss"] for row in logged_rows(where)]


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], keys) -> float:
    return max((a[k].double() - b[k].double()).abs().max().item() for k in keys)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("care-ddp")
    folder = str(save_tiny_qwen2vl(tmp / "tiny_qwen2vl", seed=1))
    nli = write_nli_csv(tmp / "nli.csv", rows=TRIPLETS)
    one, two = tmp / "one", tmp / "two"
    _train(folder, nli, one, processes=1)
    stdout = _train(folder, nli, two, processes=2)
    return {"tmp": tmp, "folder": folder, "nli": nli, "one": one, "two": two, "stdout": stdout}


def test_two_lora_processes_end_where_one_process_ends(runs):
    one, two = runs["one"], runs["two"]
    assert runs["stdout"].count("training CaRe stage II") == 1  # rank 0 alone reports
    final_one, final_two = _weights(one / "epoch_2.pth"), _weights(two / "epoch_2.pth")
    assert final_one.keys() == final_two.keys()
    adapters = [k for k in final_one if "lora_" in k]
    assert adapters
    # training moved the adapters far beyond the tolerance, so equality is not trivial
    assert _max_diff(_weights(one / "epoch_1.pth"), final_one, adapters) > 100 * TOL
    assert _max_diff(final_one, final_two, final_one) < TOL
    # the same global batch at every step: the same gathered loss
    l1, l2 = _losses(one), _losses(two)
    assert len(l1) == len(l2) == EPOCHS * TRIPLETS // GLOBAL_BATCH
    assert l1 == pytest.approx(l2, abs=TOL)


def test_resumed_two_lora_process_run_ends_where_the_uninterrupted_one_does(runs):
    killed = runs["tmp"] / "killed"
    (killed / "epoch_2.pth").mkdir(parents=True)
    log = _train(runs["folder"], runs["nli"], killed, processes=2, fails=True)
    assert "IsADirectoryError" in log and "epoch_2.pth" in log
    assert (killed / "last_checkpoint").read_text().strip() == str(killed / "epoch_1.pth")
    (killed / "epoch_2.pth").rmdir()
    _train(runs["folder"], runs["nli"], killed, processes=2, resume=True)
    died, resumed = sorted(killed.glob("*/vis_data/scalars.json"))  # the killed run's log, then the resumed's
    steps = TRIPLETS // GLOBAL_BATCH
    assert len(_losses(died)) == EPOCHS * steps
    assert _losses(resumed) == pytest.approx(_losses(runs["two"])[steps:], abs=TOL)  # epoch 2's steps again
    uninterrupted = _weights(runs["two"] / "epoch_2.pth")
    assert _max_diff(_weights(killed / "epoch_2.pth"), uninterrupted, uninterrupted) < TOL
