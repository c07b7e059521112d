"""`vlr train paragraph/c7` trains on hard negatives `vlr mine` wrote: the mined file is what
the C7 recipe's dataset reads, and MMEngine's Runner trains on it."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("mmengine")
from mmengine.config import Config  # noqa: E402
from mmengine.runner import Runner  # noqa: E402

from _refusal import run_vlr  # noqa: E402
from vlr_plugins.data.sample import read_paragraph_samples  # noqa: E402
from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config  # noqa: E402
from vlr_plugins.recipe import load_recipe  # noqa: E402


def test_c7_trains_on_mined_hard_negatives(tiny_world, tiny_encoder_cfg, tmp_path):
    mined = tmp_path / "mined.jsonl"
    code, _, stderr = run_vlr(["mine", "paragraph", tiny_world["train"], "--model", "_bow_model:BagOfWords",
                               "--out", mined, "-k", "2", "--range-min", "1"])
    assert code == 0, stderr
    samples = read_paragraph_samples(mined)
    own = {s.id: {s.caption, *s.positives} for s in read_paragraph_samples(tiny_world["train"])}
    assert all(len(s.hard_negatives) == 2 and not set(s.hard_negatives) & own[s.id] for s in samples)
    recipe = load_recipe("paragraph/c7", {
        "model": tiny_encoder_cfg,
        "data": {"train": str(mined), "image_embeddings": tiny_world["image_embeddings"]},
        "train": {"batch_size": 16, "epochs": 1, "lr": 1e-3, "warmup_steps": 1, "num_workers": 0, "log_interval": 1},
        "eval": [{"name": "short", "ann_file": tiny_world["eval_short"], "max_tokens": 77}],
    })
    runner = Runner.from_cfg(Config(recipe_to_mmengine_config(recipe, str(tmp_path / "work"), log_level="WARNING")))
    try:
        dataset = runner.train_dataloader.dataset
        tokenizer = tiny_world["object"].tokenizer()
        by_id = {s.id: s for s in samples}
        for index in range(3):  # each item's negatives are its mined ones, tokenized
            item = dataset[index]
            mined_ids = [tokenizer(t, truncation=True, max_length=77)["input_ids"]
                         for t in by_id[item["id"]].hard_negatives]
            assert item["neg"] and all(list(map(int, ids)) in mined_ids for ids in item["neg"])
        runner.train()
    finally:
        logging.getLogger("mmengine").handlers.clear()
    assert (tmp_path / "work" / "epoch_1.pth").exists()
