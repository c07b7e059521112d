"""The bad-input catalogue for recipes that are MMEngine configs (`vlr train care/...`)."""

from __future__ import annotations

import pytest
from _refusal import assert_refused

pytest.importorskip("mmengine.registry")

FILLED = ["--set", "model.embedder.pretrained=some/folder", "train_dataloader.dataset.tokenizer=some/folder"]
CPU = "optim_wrapper={type: OptimWrapper, optimizer: {type: AdamW, lr: 0.01}}"


@pytest.mark.parametrize("extra, where", [
    ([], ["model.embedder.pretrained", "train_dataloader.dataset.ann_file", "--train FILE"]),
    (["--train", "nope.csv"], ["--train", "nope.csv"]),
    (["--image-embeddings", "store"], ["--image-embeddings", "MMEngine config"]),
    (["--tokenizer", "tok"], ["--tokenizer", "MMEngine config"]),
    (["--set", "modle.x=1"], ["--set", "modle.x"]),
    (["--set", "train_cfg.max_epochs"], ["--set", "KEY=VALUE"]),
    (["--set", "model=1", "model.x=2"], ["--set", "model"]),
    (["--train", "{csv}", *FILLED, "{cpu}", "model.loss.cache_chunk=2"],
     ["model.loss.cache_chunk", "SupervisedSimCSELoss takes no argument 'cache_chunk'", "temperature"]),
    (["--train", "{csv}", *FILLED, "{cpu}", "model.loss.temprature=0.1"],
     ["model.loss.temprature", "did you mean 'temperature'?"]),
    (["--train", "{csv}", *FILLED, "runner_type=FlexibleRunner", "strategy={type: FSDPStrategy}",
      "optim_wrapper={type: OptimWrapper, optimizer: {type: AdamW, lr: 0.01}, clip_grad: {max_norm: 1.0, foreach: true}}"],
     ["optim_wrapper.clip_grad: foreach", "FSDPStrategy", "max_norm and norm_type only"]),
    (["--train", "{csv}", *FILLED, "model_wrapper_cfg={type: MMFullyShardedDataParallel}", CPU],
     ["model_wrapper_cfg: MMFullyShardedDataParallel under MMEngine's Runner", "flat shards",
      "runner_type=FlexibleRunner", "FSDPStrategy"]),
], ids=["values-left", "train-missing", "image-embeddings", "tokenizer", "unknown-section", "not-key-value",
        "inside-a-value", "loss-argument-unknown", "loss-argument-misspelt", "fsdp-clip-argument",
        "fsdp-wrapper-on-runner"])
def test_care_recipes_refuse_bad_input_before_the_runner(tmp_path, extra, where):
    work = tmp_path / "run"
    csv = tmp_path / "nli.csv"
    csv.write_text("sent0,sent1,hard_neg\na,b,c\n")
    extra = [{"{csv}": str(csv), "{cpu}": CPU}.get(a, a) for a in extra]
    assert_refused(["train", "care/stage2_paper", "--work-dir", work, *extra], *where, leaves=[work], cwd=tmp_path)


def test_mixed_precision_without_a_gpu_is_refused_with_the_way_out(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    csv = tmp_path / "nli.csv"
    csv.write_text("sent0,sent1,hard_neg\na,b,c\n")
    work = tmp_path / "run"
    assert_refused(["train", "care/stage2_paper", "--train", csv, "--work-dir", work, *FILLED],
                   "AmpOptimWrapper", "optim_wrapper={type: OptimWrapper", leaves=[work], cwd=tmp_path)


def test_an_unknown_runner_type_is_refused_naming_the_key(tmp_path):
    csv = tmp_path / "nli.csv"
    csv.write_text("sent0,sent1,hard_neg\n" + "".join(f"a{i},b{i},c{i}\n" for i in range(5)))
    work = tmp_path / "run"
    assert_refused(["train", "care/stage2_paper", "--train", csv, "--work-dir", work, *FILLED, CPU,
                    "train_dataloader.batch_size=1", "runner_type=NoSuchRunner"],
                   "runner_type", "FlexibleRunner", "'NoSuchRunner'", leaves=[work], cwd=tmp_path)


@pytest.mark.parametrize("rows, batch, where", [
    # 5 triplets, batches of 96 with drop_last (the recipe's): no batch at all
    (5, None, ["train_dataloader", "0 iteration(s) an epoch: 5 training samples, batch 96 per process x 1 "
               "process(es)", "no full batch"]),
    # 5 triplets in batches of 4: one iteration; the 0.4-epoch warm-up is int(0.4 x 1) = 0 of them
    (5, 4, ["param_scheduler[0] (LinearLR)", "begin 0, end 0.4", "iterations 0 to 0",
            "1 iteration(s) an epoch: 5 training samples, batch 4 per process x 1 process(es)",
            "end must be larger than begin"]),
    # 4 triplets in batches of 2: warm-up 0 to 0 (int(0.8))
    (4, 2, ["param_scheduler[0] (LinearLR)", "iterations 0 to 0", "2 iteration(s) an epoch"]),
    # 8 triplets in batches of 2: a warm-up of one iteration (int(1.6)), which MMEngine's LinearLR
    # never finishes: the rate would stay 1e-6 x lr for the whole run
    (8, 2, ["param_scheduler[0] (LinearLR)", "iterations 0 to 1", "a ramp over one step",
            "the factor would stay 1e-06 for the whole run"]),
], ids=["no-batch", "one-batch", "two-batches", "a-one-step-ramp"])
def test_a_schedule_that_rounds_to_no_step_is_refused_before_the_model_loads(tmp_path, rows, batch, where):
    """The model folder does not exist: the refusal comes before anything would load it."""
    csv = tmp_path / "nli.csv"
    csv.write_text("sent0,sent1,hard_neg\n" + "".join(f"a{i},b{i},c{i}\n" for i in range(rows)))
    work = tmp_path / "run"
    extra = [] if batch is None else [f"train_dataloader.batch_size={batch}"]
    assert_refused(["train", "care/stage2_paper", "--train", csv, "--work-dir", work, *FILLED, CPU, *extra],
                   *where, leaves=[work], cwd=tmp_path)
