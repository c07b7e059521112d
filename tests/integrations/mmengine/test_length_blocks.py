"""``train.length_blocks`` in an MMEngine run: the recipe switch reaches the model, the
training pass encodes a C5 batch (captions and paragraphs) in blocks cut to their own
length, and the run trains the weights of the one-block run, with and without gradient
caching."""

from __future__ import annotations

import logging

import pytest
import torch

pytest.importorskip("mmengine")
from mmengine.config import Config  # noqa: E402
from mmengine.runner import Runner  # noqa: E402

from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config  # noqa: E402
from vlr_plugins.recipe import load_recipe  # noqa: E402
from vlr_plugins.text import length_block_bounds  # noqa: E402

TOL = dict(rtol=1e-5, atol=1e-5)


def _runner(tiny_world, tiny_encoder_cfg, work_dir, length_blocks, cache_chunk=None):
    """paragraph/c5 (a caption and a paragraph per image) on the tiny world: 3 steps of
    batch 16. The tiny encoder has no dropout, so every run computes the same function."""
    recipe = load_recipe("paragraph/c5", {
        "model": tiny_encoder_cfg,
        "loss": {"cache_chunk": cache_chunk} if cache_chunk else {},
        "data": {"train": tiny_world["train"], "image_embeddings": tiny_world["image_embeddings"]},
        "train": {"batch_size": 16, "epochs": 1, "lr": 1e-3, "warmup_steps": 1, "num_workers": 0,
                  "length_blocks": length_blocks},
    })
    return Runner.from_cfg(Config(recipe_to_mmengine_config(recipe, str(work_dir), log_level="WARNING")))


def test_c5_encodes_in_two_length_blocks_by_default():
    assert load_recipe("paragraph/c5").train.length_blocks == 2
    assert load_recipe("paragraph/c1").train.length_blocks == 1  # captions only: one block


def test_the_switch_reaches_the_model_and_cuts_the_blocks(tiny_world, tiny_encoder_cfg, tmp_path):
    runner = _runner(tiny_world, tiny_encoder_cfg, tmp_path, 2)
    model = runner.model
    assert model.length_blocks == 2
    batch = model.data_preprocessor(next(iter(runner.train_dataloader)), True)
    lengths = batch["attention_mask"].sum(1)
    bounds = length_block_bounds(lengths.sort().values, 2)
    assert len(bounds) == 2, "the tiny world's captions and paragraphs differ in length"
    widths = []
    handle = model.text_encoder.register_forward_pre_hook(lambda m, args: widths.append(tuple(args[0].shape)))
    try:
        model(**batch, mode="loss")
    finally:
        handle.remove()
    sorted_lengths = lengths.sort().values.tolist()
    starts = [0, *bounds[:-1]]
    assert widths == [(end - start, sorted_lengths[end - 1]) for start, end in zip(starts, bounds)]
    assert widths[-1][1] == batch["input_ids"].shape[1] and widths[0][1] < widths[-1][1]


def _first_loss(runner) -> torch.Tensor:
    model = runner.model
    batch = model.data_preprocessor(next(iter(runner.train_dataloader)), True)
    return model(**batch, mode="loss")["loss"].detach()


@pytest.mark.parametrize("cache_chunk", [None, 5])
def test_two_blocks_train_the_weights_of_one_block(tiny_world, tiny_encoder_cfg, tmp_path, cache_chunk):
    losses, weights = {}, {}
    for blocks in (1, 2):
        runner = _runner(tiny_world, tiny_encoder_cfg, tmp_path / str(blocks), blocks, cache_chunk)
        losses[blocks] = _first_loss(runner)
        start = {k: v.clone() for k, v in runner.model.state_dict().items()}
        runner.train()
        weights[blocks] = runner.model.state_dict()
        logging.getLogger("mmengine").handlers.clear()
    torch.testing.assert_close(losses[2], losses[1], **TOL)
    changed = 0
    for name, expected in weights[1].items():
        torch.testing.assert_close(weights[2][name], expected, **TOL, msg=name)
        changed += name.startswith("text_encoder.") and not torch.equal(expected, start[name])
    assert changed > 10, "the runs trained"


def test_the_model_refuses_a_bad_length_blocks(tiny_encoder_cfg):
    from vlr_plugins.integrations.mmengine.model import TextOnlyRetrievalModel

    with pytest.raises(ValueError, match=r"TextOnlyRetrievalModel: length_blocks must be an integer >= 1.*found 0"):
        TextOnlyRetrievalModel(text_encoder=tiny_encoder_cfg, loss={"type": "MultiPositiveInfoNCELoss"},
                               length_blocks=0)
