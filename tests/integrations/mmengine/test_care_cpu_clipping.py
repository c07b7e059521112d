"""Gradient clipping and accumulation (the CaRe recipes' ``clip_grad: {max_norm: 1.0}`` and
``accumulative_counts`` / DeepSpeed's ``gradient_clipping`` and ``gradient_accumulation_steps``)
under FSDP and DeepSpeed ZeRO-1, -2 and -3 on two CPU processes (torchrun, gloo), against one process with
MMEngine's own ``OptimWrapper`` doing both (tests/_support/_care_runs.py).

A sharded strategy must clip by the norm of the whole gradient, not of each rank's shard, and
accumulate over the same micro-batches. AdamW would hide a wrong clip (its step is nearly
independent of the gradient's scale), so these runs train with SGD, and with a max norm far below
the gradients' (~0.07), so that every step is clipped: a run that clipped by its shard's norm, or
not at all, would move the adapters by a different amount (one process with and without clipping
end 1.2e-2 apart; the tolerance is 1e-5).

Under FSDP both ways of wrapping: the whole model as one unit (whose shards happen to put every
LoRA adapter on one rank, so that a clip by each rank's shard would pass unnoticed) and the
recipe's decoder-layer policy (adapters on both ranks: MMEngine's own clip, by each shard's norm,
ended 7e-4 from one process and logged rank 0's share as ``grad_norm``). Each logs the whole
gradient's norm, as one process does.
"""

from __future__ import annotations

import pytest

pytest.importorskip("mmengine")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from _torchrun import load_checkpoint, require_torchrun  # noqa: E402

require_torchrun()

from _care_runs import (DEEPSPEED, FSDP, LAYERS, TOL, TRIPLETS, losses, max_diff, require_deepspeed,  # noqa: E402
                        train, weights)
from _tiny_mllm import save_tiny_qwen2vl, write_nli_csv  # noqa: E402
from _torchrun import logged_rows  # noqa: E402

MAX_NORM, ACCUMULATE, SGD = 0.01, 2, "{type: SGD, lr: 0.5}"
#: FSDP with the decoder-layer wrap policy, one full checkpoint
FSDP_LAYERS = ["runner_type=FlexibleRunner",
               "strategy={type: FSDPStrategy, state_dict_cfg: full, model_wrapper: {auto_wrap_policy: " + LAYERS + "}}"]


def grad_norms(where) -> list[float]:
    """The ``grad_norm`` MMEngine logs at each step that updates (none before the first)."""
    return [row["grad_norm"] for row in logged_rows(where) if "grad_norm" in row]


def _optim_wrapper(clip: bool) -> str:
    clip_grad = f", clip_grad: {{max_norm: {MAX_NORM}}}" if clip else ""
    return f"optim_wrapper={{type: OptimWrapper, optimizer: {SGD}{clip_grad}, accumulative_counts: {ACCUMULATE}}}"


#: care/stage2_released_deepspeed as the one-process run (``DEEPSPEED``), with DeepSpeed's own
#: clipping and accumulation and the same SGD (ZeRO takes it once told it may)
DEEPSPEED_CLIPPED = [*DEEPSPEED, f"strategy.gradient_clipping={MAX_NORM}",
                     f"strategy.gradient_accumulation_steps={ACCUMULATE}", f"optim_wrapper.optimizer={SGD}",
                     "strategy.config={zero_allow_untested_optimizer: true}"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("care-clipping")
    folder = str(save_tiny_qwen2vl(tmp / "tiny_qwen2vl", seed=1))
    nli = write_nli_csv(tmp / "nli.csv", rows=TRIPLETS)
    runs = {"tmp": tmp, "folder": folder, "nli": nli}
    for name, clip in (("one", True), ("one-unclipped", False)):
        train(folder, nli, tmp / name, processes=1, extra=(_optim_wrapper(clip),))
    return runs


def test_clipping_changes_the_one_process_run(runs):
    clipped, unclipped = (weights(runs["tmp"] / name / "epoch_2.pth") for name in ("one", "one-unclipped"))
    assert max_diff(clipped, unclipped, clipped) > 100 * TOL


@pytest.mark.parametrize("strategy", ["fsdp", "fsdp-layers", "zero1", "zero2", "zero3"])
def test_two_processes_clip_and_accumulate_as_one_process(strategy, runs):
    """FSDP (one full checkpoint; the model one unit, or a unit per decoder layer) and DeepSpeed
    ZeRO stages 1-3 (ZeRO-3 partitions the parameters too: its checkpoint is put together with
    DeepSpeed's own ``zero_to_fp32``)."""
    work = runs["tmp"] / strategy
    if strategy.startswith("zero"):
        require_deepspeed()
        stage = int(strategy[-1])
        train(runs["folder"], runs["nli"], work, processes=2, recipe="care/stage2_released_deepspeed",
              extra=(*DEEPSPEED_CLIPPED, f"strategy.zero_optimization.stage={stage}"))
        if stage == 3:
            from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

            assert not (work / "epoch_2.pth" / "mp_rank_00_model_states.pt").exists()  # partitioned
            final = get_fp32_state_dict_from_zero_checkpoint(str(work), tag="epoch_2.pth")
        else:
            final = load_checkpoint(work / "epoch_2.pth" / "mp_rank_00_model_states.pt")["module"]
    else:
        wrapping = FSDP if strategy == "fsdp" else FSDP_LAYERS
        train(runs["folder"], runs["nli"], work, processes=2, extra=(*wrapping, _optim_wrapper(True)))
        final = weights(work / "epoch_2.pth")
        logged, one_logged = grad_norms(work), grad_norms(runs["tmp"] / "one")
        assert len(logged) == len(one_logged) > 0
        assert logged == pytest.approx(one_logged, rel=1e-5)
    one = weights(runs["tmp"] / "one" / "epoch_2.pth")
    assert final.keys() == one.keys()
    # the per-step losses beside a weights mismatch: the first step that differs (a ZeRO-3 run once
    # ended 1.2e-3 off under CI load and passed on every rerun; its losses were not kept)
    step_losses, one_losses = losses(work), losses(runs["tmp"] / "one")
    diff = max_diff(one, final, one)
    assert diff < TOL, f"weights {diff:.2e} from one process's; losses by step: {step_losses} against {one_losses}"
    assert step_losses == pytest.approx(one_losses, abs=TOL)
