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

The FSDP case: the same two-process run on ``FlexibleRunner`` with MMEngine's
``FSDPStrategy`` (torch's FSDP, ``FULL_SHARD``: each rank holds half of the flat parameter
and of AdamW's state; ``state_dict_cfg: full`` gathers one checkpoint on rank 0), killed at
its epoch-2 checkpoint as above and resumed. On CPU processes this runs only through
``vlr train``'s strategy fixes (``vlr_plugins.integrations.mmengine.strategies``): without
them MMEngine calls ``torch.cuda.set_device``, torch's FSDP looks for an accelerator, the
gathered AdamW state comes out with ``exp_avg`` equal to ``exp_avg_sq``, and ``--resume``
stops in MMEngine's call of ``FSDP.optim_state_dict_to_load``. The killed run trained both
epochs before it died, so its logged losses are the whole run's; the resumed run ends where
the one-process run ends, within the same 1e-5 (seen: 7e-7; a resume that lost AdamW's
moments ends 1e-3 away).

The DeepSpeed case (where deepspeed 0.19.0 to 0.19.6 is installed, else skipped): the
recipe ``care/stage2_released_deepspeed`` (FlexibleRunner, ``DeepSpeedStrategy``, ZeRO-2:
each rank keeps half of AdamW's state and reduces half of the gradients) on two CPU
processes, DeepSpeed on its CPU accelerator over gloo, with what makes it the one-process
run above: stage2_paper's prompt and schedule, fp32 (``bf16`` off), no clipping, no
accumulation, buckets of 5e5 (the recipe's 2e8 allocate 800 MB of buffers on each rank).
Killed at its epoch-2 checkpoint (a file stands where the folder would go) and resumed, it
ends where the one-process run ends within 1e-5 (seen: 3e-6).

``loss.cache_chunk`` (gradient caching) is not an option of ``SupervisedSimCSELoss``, the
CaRe stage II loss, so these runs are without it.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("mmengine")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from _torchrun import load_checkpoint, require_torchrun  # noqa: E402

require_torchrun()

from _care_runs import (  # noqa: E402
    DEEPSPEED,
    EPOCHS,
    FSDP,
    GLOBAL_BATCH,
    STEPS,
    TOL,
    TRIPLETS,
    care_runs,
    killed_and_resumed,
    losses,
    max_diff,
    require_deepspeed,
    train,
    weights,
)



@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return care_runs(tmp_path_factory.mktemp("care-ddp"))


def test_two_lora_processes_end_where_one_process_ends(runs):
    one, two = runs["one"], runs["two"]
    assert runs["stdout"].count("training CaRe stage II") == 1  # rank 0 alone reports
    final_one, final_two = weights(one / "epoch_2.pth"), weights(two / "epoch_2.pth")
    assert final_one.keys() == final_two.keys()
    adapters = [k for k in final_one if "lora_" in k]
    assert adapters
    # training moved the adapters far beyond the tolerance, so equality is not trivial
    assert max_diff(weights(one / "epoch_1.pth"), final_one, adapters) > 100 * TOL
    assert max_diff(final_one, final_two, final_one) < TOL
    # the same global batch at every step: the same gathered loss
    l1, l2 = losses(one), losses(two)
    assert len(l1) == len(l2) == EPOCHS * TRIPLETS // GLOBAL_BATCH
    assert l1 == pytest.approx(l2, abs=TOL)


def test_resumed_two_lora_process_run_ends_where_the_uninterrupted_one_does(runs):
    killed = runs["tmp"] / "killed"
    (killed / "epoch_2.pth").mkdir(parents=True)
    log = train(runs["folder"], runs["nli"], killed, processes=2, fails=True)
    assert "IsADirectoryError" in log and "epoch_2.pth" in log
    assert (killed / "last_checkpoint").read_text().strip() == str(killed / "epoch_1.pth")
    (killed / "epoch_2.pth").rmdir()
    train(runs["folder"], runs["nli"], killed, processes=2, resume=True)
    died, resumed = sorted(killed.glob("*/vis_data/scalars.json"))  # the killed run's log, then the resumed's
    steps = TRIPLETS // GLOBAL_BATCH
    assert len(losses(died)) == EPOCHS * steps
    assert losses(resumed) == pytest.approx(losses(runs["two"])[steps:], abs=TOL)  # epoch 2's steps again
    uninterrupted = weights(runs["two"] / "epoch_2.pth")
    assert max_diff(weights(killed / "epoch_2.pth"), uninterrupted, uninterrupted) < TOL


def test_a_killed_and_resumed_two_process_fsdp_run_ends_where_one_process_ends(runs):
    work, log, died, resumed = killed_and_resumed(runs, "fsdp", FSDP)
    assert "IsADirectoryError" in log  # rank 0's full checkpoint of epoch 2 could not be written
    one = losses(runs["one"])
    assert died == pytest.approx(one, abs=TOL)  # every step of both epochs, before it died
    assert resumed == pytest.approx(one[STEPS:], abs=TOL)
    final_one, final_fsdp = weights(runs["one"] / "epoch_2.pth"), weights(work / "epoch_2.pth")
    assert final_one.keys() == final_fsdp.keys()  # one full checkpoint, the unsharded names
    assert max_diff(final_one, final_fsdp, final_one) < TOL
    moments = load_checkpoint(work / "epoch_1.pth")["optimizer"]["state"]
    assert moments and all(not torch.equal(m["exp_avg"], m["exp_avg_sq"]) for m in moments.values())


def test_a_killed_and_resumed_two_process_deepspeed_zero2_run_ends_where_one_process_ends(runs):
    require_deepspeed()
    work, log, died, resumed = killed_and_resumed(runs, "deepspeed", DEEPSPEED, folder=True,
                                                   recipe="care/stage2_released_deepspeed")
    assert "epoch_2.pth does not exist" in log  # DeepSpeed's words for a parent that is not a folder
    one = losses(runs["one"])
    assert died == pytest.approx(one, abs=TOL)
    assert resumed == pytest.approx(one[STEPS:], abs=TOL)
    final = load_checkpoint(work / "epoch_2.pth" / "mp_rank_00_model_states.pt")  # weights only, as the hooks wrote it
    assert final["meta"]["vlr_schedule"] == {"max_epochs": EPOCHS}
    final_one = weights(runs["one"] / "epoch_2.pth")
    assert final["module"].keys() == final_one.keys()
    assert max_diff(final_one, final["module"], final_one) < TOL
