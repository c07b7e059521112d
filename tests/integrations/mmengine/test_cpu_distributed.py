"""``vlr train paragraph/c5`` under ``torchrun --nproc_per_node 2`` on CPU processes (gloo),
end to end, against one process with the same global batch and seed.

What makes the runs comparable: the recipe's ``train.batch_size`` (16) is the global batch
(8 per rank), MMEngine's ``DefaultSampler`` draws one permutation of the samples from the
recipe's seed and the epoch, whatever the world size, and rank ``r`` takes its positions
``r, r + 2, ...``; the tiny world has 48 samples (a multiple of the world size, so the
sampler repeats none), so global batch ``i`` holds the same 16 samples in both runs, only in
another order. The text encoder has no dropout (its masks would be drawn per rank).
``MultiPositiveInfoNCELoss`` gathers both ranks' embeddings (with gradient), every rank
computes the global loss and DDP averages the gradients, so each step is the one-process
step up to the order of float additions (a batch in another order, the gathered sums):
that, compounded over six AdamW steps, is all the 1e-5 tolerance covers. Per step the
logged losses agree too, which a different global batch would break.

The resume case: a two-process run dies after its sixth step, before its epoch-2
checkpoint (a folder stands where rank 0 would write it; torchrun then stops both ranks),
and ``--resume`` under torchrun continues from epoch 1's checkpoint to where the
uninterrupted run ends.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("mmengine")

from _torchrun import load_checkpoint, logged_rows, require_torchrun, run_vlr_processes  # noqa: E402

require_torchrun()
import torch.distributed as dist  # noqa: E402

TOL = 1e-5


def _recipe(tmp: Path, tiny_world: dict, tiny_encoder_cfg: dict) -> Path:
    from vlr_plugins.recipe import find_recipe

    model = json.loads(json.dumps(tiny_encoder_cfg))
    model["config"].update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    path = tmp / "tiny_c5.yaml"
    path.write_text(f"_base_: {json.dumps(str(find_recipe('paragraph/c5')))}\n"
                    f"model: {json.dumps(model)}\n"
                    "train: {batch_size: 16, epochs: 2, warmup_steps: 2, lr: 0.001, num_workers: 0, "
                    "log_interval: 1}\n")
    return path


def _train(recipe: Path, tiny_world: dict, work: Path, *, processes: int, resume: bool = False,
           fails: bool = False) -> str | None:
    """``vlr train`` of ``recipe`` into ``work`` on the CPU: in this process (``vlr``'s own
    ``main``) for one process where no GPU is visible, else in a fresh interpreter with none
    visible, under ``torchrun --standalone`` (a local rendezvous on a free port) for several."""
    args = ["train", str(recipe), "--train", tiny_world["train"], "--image-embeddings",
            tiny_world["image_embeddings"], "--work-dir", str(work), *(["--resume"] if resume else [])]
    if processes == 1 and not torch.cuda.is_available():
        import logging

        from vlr_plugins.cli import main

        assert main(args) == 0
        logging.getLogger("mmengine").handlers.clear()
        return None
    return run_vlr_processes(args, processes, fails=fails)


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path)["state_dict"]


def _losses(where: Path) -> list[float]:
    """The loss logged at each step: of a run's ``scalars.json``, or of a work dir's only run."""
    return [row["loss"] for row in logged_rows(where)]


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_world, tiny_encoder_cfg):
    tmp = tmp_path_factory.mktemp("ddp")
    recipe = _recipe(tmp, tiny_world, tiny_encoder_cfg)
    one, two = tmp / "one", tmp / "two"
    _train(recipe, tiny_world, one, processes=1)
    stdout = _train(recipe, tiny_world, two, processes=2)
    return {"tmp": tmp, "recipe": recipe, "one": one, "two": two, "stdout": stdout}


def test_two_processes_end_where_one_process_ends(runs):
    one, two = runs["one"], runs["two"]
    # rank 0 alone reports; the checkpoint is the last one
    assert runs["stdout"].count("training C5 on 48 samples") == 1
    assert runs["stdout"].count("checkpoint: ") == 1 and "epoch_2.pth" in runs["stdout"]
    final_one, final_two = _weights(one / "epoch_2.pth"), _weights(two / "epoch_2.pth")
    # training moved the weights far beyond the tolerance, so equality is not trivial
    assert _max_diff(_weights(one / "epoch_1.pth"), final_one) > 20 * TOL  # about 1.5e-3 over epoch 2
    assert _max_diff(final_one, final_two) < TOL
    # the same global batch at every step: the same loss (the gathered one on each rank)
    l1, l2 = _losses(one), _losses(two)
    assert len(l1) == len(l2) == 2 * 48 // 16
    assert l1 == pytest.approx(l2, abs=TOL)


def test_resumed_two_process_run_ends_where_the_uninterrupted_one_does(runs, tiny_world):
    # a two-process run that dies after its sixth step: rank 0 cannot write epoch_2.pth (a
    # folder is in the way), so torchrun stops every rank with epoch 1's checkpoint the last
    killed = runs["tmp"] / "killed"
    (killed / "epoch_2.pth").mkdir(parents=True)
    log = _train(runs["recipe"], tiny_world, killed, processes=2, fails=True)
    assert "IsADirectoryError" in log and "epoch_2.pth" in log
    assert (killed / "last_checkpoint").read_text().strip() == str(killed / "epoch_1.pth")
    (killed / "epoch_2.pth").rmdir()
    stdout = _train(runs["recipe"], tiny_world, killed, processes=2, resume=True)
    assert f"checkpoint: {killed / 'epoch_2.pth'}" in stdout
    died, resumed = sorted(killed.glob("*/vis_data/scalars.json"))  # the killed run's log, then the resumed's
    assert len(_losses(died)) == 6
    assert _losses(resumed) == pytest.approx(_losses(runs["two"])[3:], abs=TOL)  # epoch 2's steps again
    assert _max_diff(_weights(killed / "epoch_2.pth"), _weights(runs["two"] / "epoch_2.pth")) < TOL


# --- the two pieces, on their own ----------------------------------------------------------


def test_the_wrapper_takes_a_cpu_module_with_mmengines_device_ids(tmp_path):
    from mmengine.model import MMDistributedDataParallel

    from vlr_plugins.integrations.mmengine.cpu_distributed import CpuCapableDistributedDataParallel

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        layer = torch.nn.Linear(3, 2)
        # device_ids as MMEngine passes them to every DDP subclass: DDP refuses them for a CPU module
        with pytest.raises(ValueError, match="device_ids"):
            MMDistributedDataParallel(module=layer, device_ids=[0])
        model = CpuCapableDistributedDataParallel(layer, device_ids=[0])
        assert model.device_ids is None and model.module is layer
        x = torch.full((1, 3), 2.0)
        model(x).sum().backward()  # d(sum(W x + b))/dW: x in every row
        assert torch.equal(layer.weight.grad, torch.full((2, 3), 2.0))
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only path (MMEngine finds a GPU)")
def test_process_group_is_left_to_mmengine_unless_cpu_torchrun():
    from vlr_plugins.errors import ConfigError
    from vlr_plugins.integrations.mmengine.cpu_distributed import cpu_model_wrapper_cfg, init_cpu_process_group

    assert init_cpu_process_group("none", {}) is False
    assert init_cpu_process_group("slurm", {}) is False
    with pytest.raises(ConfigError, match="env_cfg.dist_cfg.backend: nccl needs a CUDA device"):
        init_cpu_process_group("pytorch", {"dist_cfg": {"backend": "nccl"}})
    assert not dist.is_initialized()
    named = {"type": "MMDistributedDataParallel"}
    assert cpu_model_wrapper_cfg(named, True, False) is named
    assert cpu_model_wrapper_cfg(None, False, False) is None
    assert cpu_model_wrapper_cfg(None, True, True) == {
        "type": "vlr_plugins.CpuCapableDistributedDataParallel", "broadcast_buffers": False,
        "find_unused_parameters": True}
