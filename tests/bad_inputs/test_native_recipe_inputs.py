"""The bad-input catalogue for recipes that are MMEngine configs (`vlr train care/...`)."""

from __future__ import annotations

import pytest
from _refusal import assert_refused

pytest.importorskip("mmengine.registry")

FILLED = ["--set", "model.embedder.pretrained=some/folder", "train_dataloader.dataset.tokenizer=some/folder"]


@pytest.mark.parametrize("extra, where", [
    ([], ["model.embedder.pretrained", "train_dataloader.dataset.ann_file", "--train FILE"]),
    (["--train", "nope.csv"], ["--train", "nope.csv"]),
    (["--image-embeddings", "store"], ["--image-embeddings", "MMEngine config"]),
    (["--tokenizer", "tok"], ["--tokenizer", "MMEngine config"]),
    (["--set", "modle.x=1"], ["--set", "modle.x"]),
    (["--set", "train_cfg.max_epochs"], ["--set", "KEY=VALUE"]),
    (["--set", "model=1", "model.x=2"], ["--set", "model"]),
], ids=["values-left", "train-missing", "image-embeddings", "tokenizer", "unknown-section", "not-key-value",
        "inside-a-value"])
def test_care_recipes_refuse_bad_input_before_the_runner(tmp_path, extra, where):
    work = tmp_path / "run"
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
    csv.write_text("sent0,sent1,hard_neg\na,b,c\n")
    work = tmp_path / "run"
    assert_refused(["train", "care/stage2_paper", "--train", csv, "--work-dir", work, *FILLED,
                    "optim_wrapper={type: OptimWrapper, optimizer: {type: AdamW, lr: 0.01}}", "runner_type=NoSuchRunner"],
                   "runner_type", "FlexibleRunner", "'NoSuchRunner'", leaves=[work], cwd=tmp_path)
