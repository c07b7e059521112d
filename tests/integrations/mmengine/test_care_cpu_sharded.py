"""``vlr train care/...`` on two CPU processes (torchrun, gloo) under FSDP's sharded
checkpoints and wrap policies, in bf16, and CaRe stage I, against one process
(tests/_support/_care_runs.py; test_care_cpu_distributed.py has the DDP, FSDP and DeepSpeed
ZeRO-2 runs and why the tolerance holds).

The sharded FSDP case: ``state_dict_cfg: local`` (each rank saves ``rank{i}.pth``, its shards
as plain tensors: ``vlr_plugins.integrations.mmengine.strategies``) with a transformer layer
policy named as a config names it (``Qwen2VLDecoderLayer``): killed at its epoch-2 checkpoint
(a file stands where the folder would go) and resumed, it logs the killed run's epoch 2 again,
and its shards put together are the one-process weights within 1e-5; a size-based policy
runs to the same end. The bf16 cases (FSDP's mixed precision policy, DeepSpeed's bf16) are
compared by their losses (``BF16_LOSS_TOL``) and resumed exactly. CaRe stage I
(``care/stage1``: caption SFT, the whole LLM trained) runs under FSDP and DeepSpeed ZeRO-2
against one process. docs/scaling.md has the table of what runs.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("mmengine")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from _torchrun import load_checkpoint, require_torchrun, run_vlr_processes  # noqa: E402

require_torchrun()

from _care_runs import (  # noqa: E402
    BF16_LOSS_TOL,
    DEEPSPEED_BF16,
    FSDP_BF16,
    FSDP_LOCAL_LAYERS,
    FSDP_LOCAL_SIZE,
    STEPS,
    TOL,
    care_runs,
    killed_and_resumed,
    losses,
    max_diff,
    require_deepspeed,
    train,
    weights,
)

from vlr_plugins.integrations.mmengine.strategies import SHARDED_TENSOR  # noqa: E402



@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return care_runs(tmp_path_factory.mktemp("care-sharded"), two_processes=False)


def _rank_files(checkpoint: Path) -> list[dict]:
    """The two files of an FSDP ``state_dict_cfg: local`` checkpoint, weights only."""
    assert sorted(p.name for p in checkpoint.iterdir()) == ["rank0.pth", "rank1.pth"]
    return [load_checkpoint(checkpoint / f"rank{r}.pth") for r in range(2)]


def _units(rank_file: dict) -> list[str]:
    """The FSDP units of a sharded checkpoint: one flat parameter each (the root's ``_flat_param``)."""
    return sorted(k.removesuffix("_flat_param") for k in rank_file["state_dict"] if k.endswith("_flat_param"))


def _unsharded(rank_files: list[dict], like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The weights of ``like`` (a full checkpoint's) from a sharded one: FSDP's ``use_orig_params``
    saves each parameter as its rank's slice of the flattened tensor, in rank order."""
    return {k: torch.cat([f["state_dict"][k].flatten() for f in rank_files]).view(v.shape) for k, v in like.items()}


def test_fsdp_sharded_checkpoints_with_a_layer_policy_resume_where_the_uninterrupted_run_ends(runs):
    work, log, died, resumed = killed_and_resumed(runs, "fsdp-local", FSDP_LOCAL_LAYERS, folder=True)
    assert "FileExistsError" in log and "epoch_2.pth" in log  # each rank's folder of epoch 2 could not be made
    one = losses(runs["one"])
    assert died == pytest.approx(one, abs=TOL)
    assert resumed == pytest.approx(died[STEPS:], abs=TOL)  # the uninterrupted (killed) run's epoch 2, again
    files = _rank_files(work / "epoch_2.pth")
    layers = "embedder.model.model.language_model.layers"
    assert _units(files[0]) == ["", f"{layers}.0.", f"{layers}.1."]  # the root and one unit a decoder layer
    # the flat parameters and AdamW's moments were saved as this rank's shards (weights only)
    shards = files[1]["state_dict"]["_flat_param"][SHARDED_TENSOR]
    assert [s["offsets"] for s in shards["shards"]] == [[shards["size"][0] // 2]]
    state = next(iter(files[0]["optimizer"]["state"].values()))
    assert SHARDED_TENSOR in state["exp_avg"] and SHARDED_TENSOR in state["exp_avg_sq"]
    final_one = weights(runs["one"] / "epoch_2.pth")
    assert max_diff(final_one, _unsharded(files, final_one), final_one) < TOL
    assert max_diff(weights(runs["one"] / "epoch_1.pth"), final_one, final_one) > 100 * TOL


def test_fsdp_with_a_size_based_policy_ends_where_one_process_ends(runs):
    work = runs["tmp"] / "fsdp-size"
    train(runs["folder"], runs["nli"], work, processes=2, extra=FSDP_LOCAL_SIZE)
    files = _rank_files(work / "epoch_2.pth")
    assert len(_units(files[0])) > 1  # the policy wrapped modules of min_num_params each
    assert losses(work) == pytest.approx(losses(runs["one"]), abs=TOL)
    final_one = weights(runs["one"] / "epoch_2.pth")
    assert max_diff(final_one, _unsharded(files, final_one), final_one) < TOL


def test_a_layer_class_the_model_does_not_have_is_refused(runs):
    work = runs["tmp"] / "fsdp-bad-layer"
    extra = [FSDP_LOCAL_LAYERS[0], FSDP_LOCAL_LAYERS[1].replace("Qwen2VLDecoderLayer", "LlamaDecoderLayer")]
    log = train(runs["folder"], runs["nli"], work, processes=2, fails=True, extra=extra)
    assert ("error: strategy.model_wrapper.auto_wrap_policy.transformer_layer_cls: 'LlamaDecoderLayer' is not the "
            "class of any module of the model (its layer classes: ") in log
    assert "Qwen2VLDecoderLayer" in log  # the model's layer class, named
    assert "isinstance() arg 2" not in log  # torch's policy never saw the name
    assert not work.exists()  # nothing left behind (torchrun's own report of the failed ranks aside)


@pytest.mark.parametrize("strategy", ["fsdp", "deepspeed"])
def test_bf16_two_process_runs_train_near_the_fp32_run_and_resume_exactly(strategy, runs):
    """bf16 computes the loss and the gradients, so weights and losses leave the fp32 run's by
    bf16's rounding: the losses stay within BF16_LOSS_TOL of fp32's at every step (and are not
    fp32's: bf16 did compute). The weights are not compared with fp32's: AdamW steps each entry
    by about lr whatever its gradient's size, so rounding of small gradients moves entries by
    up to the adapters' own movement (seen 4e-3 at lr 1e-3). A resumed bf16 run restores
    fp32 master weights and moments, so it logs the killed run's epoch 2 within TOL."""
    if strategy == "deepspeed":
        require_deepspeed()
        work, _, died, resumed = killed_and_resumed(runs, "deepspeed-bf16", DEEPSPEED_BF16, folder=True,
                                                     recipe="care/stage2_released_deepspeed")
        final = load_checkpoint(work / "epoch_2.pth" / "mp_rank_00_model_states.pt")["module"]
        assert {v.dtype for v in final.values()} == {torch.bfloat16}  # DeepSpeed's bf16 module
    else:
        work, _, died, resumed = killed_and_resumed(runs, "fsdp-bf16", FSDP_BF16)
        final = weights(work / "epoch_2.pth")
        assert {v.dtype for v in final.values()} == {torch.float32}  # FSDP's fp32 parameters
    assert all(math.isfinite(x) for x in died + resumed)
    assert all(bool(torch.isfinite(v).all()) for v in final.values())
    one = losses(runs["one"])
    assert len(died) == len(one) and died == pytest.approx(one, abs=BF16_LOSS_TOL)
    assert max(abs(a - b) for a, b in zip(died, one)) > 10 * TOL
    assert resumed == pytest.approx(died[STEPS:], abs=TOL)


#: CaRe stage I's captions, all of 26 characters: 26 tokens of the tiny byte tokenizer each, so
#: that the two ranks' mean token losses average to the one-process batch's mean (the clips
#: differ: 32x32 and 32x48, so one process pads its batch)
CAPTIONS = ["A grey square turns white.", "Darkness, then light fades", "Nothing moves in the room.",
            "A fade to black and white."]
STAGE1_ITERS = 4

#: ``--set`` values of stage I's strategies: FSDP (full checkpoints), and DeepSpeed ZeRO-2 as the
#: stage-II recipe's ds.config (fp32, no clipping or accumulation, small buckets) with its wrapper
STAGE1 = {
    "fsdp": ["runner_type=FlexibleRunner", "strategy={type: FSDPStrategy, state_dict_cfg: full}"],
    "deepspeed": ["runner_type=FlexibleRunner",
                  "strategy={type: DeepSpeedStrategy, gradient_accumulation_steps: 1, gradient_clipping: 0.0, "
                  "bf16: {enabled: false}, zero_optimization: {stage: 2, reduce_bucket_size: 500000, "
                  "allgather_bucket_size: 500000, overlap_comm: true, reduce_scatter: true, "
                  "contiguous_gradients: true}}",
                  "optim_wrapper={type: DeepSpeedOptimWrapper, "
                  "optimizer: {type: AdamW, lr: 0.001, weight_decay: 0.0}}"],
}


def _train_stage1(runs, work: Path, *, processes: int, extra: list[str] = ()) -> str:
    """``vlr train care/stage1`` (caption SFT, full fine-tuning of the LLM, vision frozen) on the
    tiny Qwen2-VL for STAGE1_ITERS iterations of a global batch of 2 clips; ``extra``: more
    ``--set`` values (a strategy and its optimizer wrapper)."""
    optimizer = [] if any("DeepSpeedOptimWrapper" in e for e in extra) else [
        "optim_wrapper={type: OptimWrapper, optimizer: {type: AdamW, lr: 0.001, weight_decay: 0.0}}"]
    folder = runs["folder"]
    argv = ["train", "care/stage1", "--train", runs["captions"], "--work-dir", str(work), "--set",
            f"model.pretrained={folder}", f"train_dataloader.dataset.processor={folder}",
            "model.gradient_checkpointing=false", f"train_dataloader.batch_size={2 // processes}",
            "train_dataloader.num_workers=0", "train_dataloader.persistent_workers=false",
            "train_dataloader.dataset.num_frames=2", "train_dataloader.dataset.max_pixels=3136",
            f"train_cfg.max_iters={STAGE1_ITERS}", "default_hooks.checkpoint.interval=2",
            "default_hooks.logger.interval=1", "env_cfg.dist_cfg.backend=gloo", *optimizer, *extra]
    return run_vlr_processes(argv, processes)


@pytest.fixture(scope="module")
def stage1(runs):
    pytest.importorskip("av")
    pytest.importorskip("torchvision")
    from _tiny_mllm import write_captioned_clips

    clips = runs["tmp"] / "clips"
    clips.mkdir()
    runs = {**runs, "captions": write_captioned_clips(clips, CAPTIONS)}
    _train_stage1(runs, runs["tmp"] / "stage1-one", processes=1)
    return runs


@pytest.mark.parametrize("strategy", ["fsdp", "deepspeed"])
def test_care_stage1_on_two_processes_ends_where_one_process_ends(strategy, stage1):
    """InfiniteSampler deals one seeded stream of the 4 records, rank r taking every second, so
    iteration i trains on the clips one process batches together; gradients are averaged over
    the ranks. The whole LLM trains (full fine-tuning), so the exported folder (under FSDP
    gathered from the shards) must hold every weight of the one-process run's, within TOL
    (seen: 1e-6)."""
    from safetensors.torch import load_file

    if strategy == "deepspeed":
        require_deepspeed()
    one, two = stage1["tmp"] / "stage1-one", stage1["tmp"] / f"stage1-{strategy}"
    _train_stage1(stage1, two, processes=2, extra=STAGE1[strategy])
    final = two / f"iter_{STAGE1_ITERS}.pth"
    final_two = (load_checkpoint(final / "mp_rank_00_model_states.pt")["module"] if strategy == "deepspeed"
                 else weights(final))
    final_one = weights(one / f"iter_{STAGE1_ITERS}.pth")
    assert final_one.keys() == final_two.keys()
    llm = [k for k in final_one if ".language_model." in k]
    assert llm and max_diff(final_one, final_two, final_one) < TOL
    exported_one, exported_two = load_file(one / "pretrained" / "model.safetensors"), load_file(
        two / "pretrained" / "model.safetensors")
    assert exported_one.keys() == exported_two.keys()
    assert max_diff(exported_one, exported_two, exported_one) < TOL
    # training moved the LLM beyond the tolerance: the model it started from is not the result
    start = load_file(Path(stage1["folder"]) / "model.safetensors")
    moved = [k for k in exported_one if k.startswith("model.layers.")]  # the LLM's decoder layers
    assert moved and max_diff(start, exported_one, moved) > 100 * TOL
