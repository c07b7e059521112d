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

The sharded FSDP case: ``state_dict_cfg: local`` (each rank saves ``rank{i}.pth``, its shards
as plain tensors: ``vlr_plugins.integrations.mmengine.strategies``) with a transformer layer
policy named as a config names it (``Qwen2VLDecoderLayer``): killed at its epoch-2 checkpoint
(a file stands where the folder would go) and resumed, it logs the killed run's epoch 2 again,
and its shards put together are the one-process weights within 1e-5; a size-based policy
runs to the same end. The bf16 cases (FSDP's mixed precision policy, DeepSpeed's bf16) are
compared by their losses (``BF16_LOSS_TOL``) and resumed exactly. CaRe stage I
(``care/stage1``: caption SFT, the whole LLM trained) runs under FSDP and DeepSpeed ZeRO-2
against one process. docs/scaling.md has the table of what runs.

``loss.cache_chunk`` (gradient caching) is not an option of ``SupervisedSimCSELoss``, the
CaRe stage II loss, so these runs are without it.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("mmengine")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from _torchrun import load_checkpoint, logged_rows, require_torchrun, run_vlr_processes  # noqa: E402

require_torchrun()

from _tiny_mllm import save_tiny_qwen2vl, write_nli_csv  # noqa: E402

from vlr_plugins.integrations.mmengine.strategies import SHARDED_TENSOR  # noqa: E402

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


def _train(folder: str, nli: str, work: Path, *, processes: int, resume: bool = False, fails: bool = False,
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


def _killed_and_resumed(runs, name: str, extra: list[str], *, recipe: str = "care/stage2_paper",
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
    log = _train(runs["folder"], runs["nli"], work, processes=2, fails=True, extra=extra, recipe=recipe)
    assert "epoch_2.pth" in log
    assert (work / "last_checkpoint").read_text().strip() == str(work / "epoch_1.pth")
    blocked.unlink() if folder else blocked.rmdir()
    _train(runs["folder"], runs["nli"], work, processes=2, resume=True, extra=extra, recipe=recipe)
    died, resumed = sorted(work.glob("*/vis_data/scalars.json"))  # the killed run's log, then the resumed's
    return work, log, _losses(died), _losses(resumed)


def _require_deepspeed() -> None:
    from importlib.metadata import version

    pytest.importorskip("deepspeed", reason="deepspeed is not installed (pip install 'vlr-plugins[deepspeed]')")
    from packaging.version import Version

    if not Version("0.19.0") <= Version(version("deepspeed")) < Version("0.19.7"):
        pytest.skip(f"deepspeed {version('deepspeed')}: MMEngine 0.10.7 drives 0.19.0 to 0.19.6 (docs/scaling.md)")


STEPS = TRIPLETS // GLOBAL_BATCH


def test_a_killed_and_resumed_two_process_fsdp_run_ends_where_one_process_ends(runs):
    work, log, died, resumed = _killed_and_resumed(runs, "fsdp", FSDP)
    assert "IsADirectoryError" in log  # rank 0's full checkpoint of epoch 2 could not be written
    one = _losses(runs["one"])
    assert died == pytest.approx(one, abs=TOL)  # every step of both epochs, before it died
    assert resumed == pytest.approx(one[STEPS:], abs=TOL)
    final_one, final_fsdp = _weights(runs["one"] / "epoch_2.pth"), _weights(work / "epoch_2.pth")
    assert final_one.keys() == final_fsdp.keys()  # one full checkpoint, the unsharded names
    assert _max_diff(final_one, final_fsdp, final_one) < TOL
    moments = load_checkpoint(work / "epoch_1.pth")["optimizer"]["state"]
    assert moments and all(not torch.equal(m["exp_avg"], m["exp_avg_sq"]) for m in moments.values())


def test_a_killed_and_resumed_two_process_deepspeed_zero2_run_ends_where_one_process_ends(runs):
    _require_deepspeed()
    work, log, died, resumed = _killed_and_resumed(runs, "deepspeed", DEEPSPEED, folder=True,
                                                   recipe="care/stage2_released_deepspeed")
    assert "epoch_2.pth does not exist" in log  # DeepSpeed's words for a parent that is not a folder
    one = _losses(runs["one"])
    assert died == pytest.approx(one, abs=TOL)
    assert resumed == pytest.approx(one[STEPS:], abs=TOL)
    final = load_checkpoint(work / "epoch_2.pth" / "mp_rank_00_model_states.pt")  # weights only, as the hooks wrote it
    assert final["meta"]["vlr_schedule"] == {"max_epochs": EPOCHS}
    final_one = _weights(runs["one"] / "epoch_2.pth")
    assert final["module"].keys() == final_one.keys()
    assert _max_diff(final_one, final["module"], final_one) < TOL


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
    work, log, died, resumed = _killed_and_resumed(runs, "fsdp-local", FSDP_LOCAL_LAYERS, folder=True)
    assert "FileExistsError" in log and "epoch_2.pth" in log  # each rank's folder of epoch 2 could not be made
    one = _losses(runs["one"])
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
    final_one = _weights(runs["one"] / "epoch_2.pth")
    assert _max_diff(final_one, _unsharded(files, final_one), final_one) < TOL
    assert _max_diff(_weights(runs["one"] / "epoch_1.pth"), final_one, final_one) > 100 * TOL


def test_fsdp_with_a_size_based_policy_ends_where_one_process_ends(runs):
    work = runs["tmp"] / "fsdp-size"
    _train(runs["folder"], runs["nli"], work, processes=2, extra=FSDP_LOCAL_SIZE)
    files = _rank_files(work / "epoch_2.pth")
    assert len(_units(files[0])) > 1  # the policy wrapped modules of min_num_params each
    assert _losses(work) == pytest.approx(_losses(runs["one"]), abs=TOL)
    final_one = _weights(runs["one"] / "epoch_2.pth")
    assert _max_diff(final_one, _unsharded(files, final_one), final_one) < TOL


def test_a_layer_class_the_model_does_not_have_is_refused(runs):
    work = runs["tmp"] / "fsdp-bad-layer"
    extra = [FSDP_LOCAL_LAYERS[0], FSDP_LOCAL_LAYERS[1].replace("Qwen2VLDecoderLayer", "LlamaDecoderLayer")]
    log = _train(runs["folder"], runs["nli"], work, processes=2, fails=True, extra=extra)
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
        _require_deepspeed()
        work, _, died, resumed = _killed_and_resumed(runs, "deepspeed-bf16", DEEPSPEED_BF16, folder=True,
                                                     recipe="care/stage2_released_deepspeed")
        final = load_checkpoint(work / "epoch_2.pth" / "mp_rank_00_model_states.pt")["module"]
        assert {v.dtype for v in final.values()} == {torch.bfloat16}  # DeepSpeed's bf16 module
    else:
        work, _, died, resumed = _killed_and_resumed(runs, "fsdp-bf16", FSDP_BF16)
        final = _weights(work / "epoch_2.pth")
        assert {v.dtype for v in final.values()} == {torch.float32}  # FSDP's fp32 parameters
    assert all(math.isfinite(x) for x in died + resumed)
    assert all(bool(torch.isfinite(v).all()) for v in final.values())
    one = _losses(runs["one"])
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
        _require_deepspeed()
    one, two = stage1["tmp"] / "stage1-one", stage1["tmp"] / f"stage1-{strategy}"
    _train_stage1(stage1, two, processes=2, extra=STAGE1[strategy])
    final = two / f"iter_{STAGE1_ITERS}.pth"
    final_two = (load_checkpoint(final / "mp_rank_00_model_states.pt")["module"] if strategy == "deepspeed"
                 else _weights(final))
    final_one = _weights(one / f"iter_{STAGE1_ITERS}.pth")
    assert final_one.keys() == final_two.keys()
    llm = [k for k in final_one if ".language_model." in k]
    assert llm and _max_diff(final_one, final_two, final_one) < TOL
    exported_one, exported_two = load_file(one / "pretrained" / "model.safetensors"), load_file(
        two / "pretrained" / "model.safetensors")
    assert exported_one.keys() == exported_two.keys()
    assert _max_diff(exported_one, exported_two, exported_one) < TOL
    # training moved the LLM beyond the tolerance: the model it started from is not the result
    start = load_file(Path(stage1["folder"]) / "model.safetensors")
    moved = [k for k in exported_one if k.startswith("model.layers.")]  # the LLM's decoder layers
    assert moved and _max_diff(start, exported_one, moved) > 100 * TOL
