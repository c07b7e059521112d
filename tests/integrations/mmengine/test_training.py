"""The paragraph recipes through MMEngine's own Runner: train, validate, checkpoint, resume."""

from __future__ import annotations

import copy
import logging

import pytest
import torch

pytest.importorskip("mmengine")
from mmengine.config import Config  # noqa: E402
from mmengine.runner import Runner  # noqa: E402

from vlr_plugins.eval.evaluate import evaluate_splits  # noqa: E402
from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config  # noqa: E402
from vlr_plugins.recipe import load_recipe  # noqa: E402


def recipe_for(name, tiny_world, tiny_encoder_cfg, **train):
    return load_recipe(name, {
        "model": tiny_encoder_cfg,
        "data": {"train": tiny_world["train"], "image_embeddings": tiny_world["image_embeddings"]},
        "train": {"batch_size": 16, "epochs": 2, "lr": 1e-3, "warmup_steps": 2, "num_workers": 0,
                  "log_interval": 1, **train},
        "eval": [{"name": "short", "ann_file": tiny_world["eval_short"], "max_tokens": 77},
                 {"name": "long", "ann_file": tiny_world["eval_long"], "max_tokens": 128}],
    })


def make_runner(recipe, work_dir, **cfg_changes):
    cfg = Config(recipe_to_mmengine_config(recipe, str(work_dir), log_level="WARNING"))
    for k, v in cfg_changes.items():
        cfg[k] = v
    return Runner.from_cfg(cfg)


@pytest.mark.parametrize("name", ["paragraph/c5", "paragraph/c7", "paragraph/c2"])
def test_training_changes_only_the_text_side_and_validates(name, tiny_world, tiny_encoder_cfg, tmp_path):
    recipe = recipe_for(name, tiny_world, tiny_encoder_cfg)
    runner = make_runner(recipe, tmp_path)
    before = copy.deepcopy(runner.model.state_dict())
    runner.train()
    after = runner.model.state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert any(k.startswith("text_encoder.text_encoder.") for k in changed)
    assert any(k.startswith("text_encoder.text_proj.") for k in changed)
    assert all(k.startswith("text_encoder.") for k in changed), "only the text side may train"
    # the model holds the core loss object, the same one other trainers use
    from vlr_plugins.registry import LOSSES

    assert type(runner.model.loss_fn) is LOSSES.get(recipe.loss["type"])
    metrics = runner.val_loop.run()
    assert {"short/i2t_r1", "short/t2i_r10", "long/r_mean"} <= set(metrics)
    # the MMEngine metric equals the core evaluation of the same encoder
    direct = evaluate_splits(runner.model.text_encoder, tiny_world["object"].tokenizer(), recipe.eval,
                             image_embeddings=tiny_world["image_embeddings"], progress=False)
    for split in ("short", "long"):
        for k, v in direct[split].items():
            assert metrics[f"{split}/{k}"] == pytest.approx(v), (split, k)


def test_checkpoints_load_weights_only_and_training_resumes(tiny_world, tiny_encoder_cfg, tmp_path):
    recipe = recipe_for("paragraph/c5", tiny_world, tiny_encoder_cfg, epochs=2)
    runner = make_runner(recipe, tmp_path)
    runner.train()
    trained = copy.deepcopy(runner.model.state_dict())
    ckpt = torch.load(tmp_path / "epoch_2.pth", map_location="cpu", weights_only=True)
    assert ckpt["meta"]["epoch"] == 2
    assert ckpt["meta"]["vlr_recipe"]["name"] == "C5"
    assert ckpt["meta"]["vlr_recipe"]["text_views"]["positives"][1]["field"] == "paragraph"
    assert ckpt["meta"]["vlr_schedule"] == {"max_epochs": 2}  # what a resumed run must ask for
    for k, v in trained.items():
        assert torch.equal(ckpt["state_dict"][k], v)
    # the checkpoint alone rebuilds the trained text encoder (no config code executed)
    from vlr_plugins.specs import load_text_encoder

    rebuilt = load_text_encoder(tmp_path / "epoch_2.pth")
    ids = torch.randint(5, 40, (3, 9))
    mask = torch.ones_like(ids)
    runner.model.text_encoder.eval()
    with torch.no_grad():
        assert torch.allclose(rebuilt(ids, mask), runner.model.text_encoder(ids, mask), atol=1e-6)
    logging.getLogger("mmengine").handlers.clear()

    longer = recipe_for("paragraph/c5", tiny_world, tiny_encoder_cfg, epochs=3)
    resumed = make_runner(longer, tmp_path, resume=True, load_from=None)
    resumed.train()
    assert resumed.epoch == 3 and (tmp_path / "epoch_3.pth").exists()
    iters_per_epoch = 48 // 16  # tiny world: 48 samples, batch 16
    assert resumed.iter == 3 * iters_per_epoch
    # the logged loss history survived the round trip through the weights-only checkpoint
    assert len(resumed.message_hub.get_scalar("train/loss").data[0]) == 3 * iters_per_epoch


@pytest.mark.parametrize("warmup_steps", [0, 1, 3])
def test_the_lr_reaches_its_peak_after_the_warmup(tiny_world, tiny_encoder_cfg, tmp_path, warmup_steps):
    """MMEngine's own schedulers, stepped as the runner steps them: the lr is the recipe's peak at
    step max(warmup_steps - 1, 0) (a one-step warm-up is none; LinearLR(end=1) would keep the
    start factor for the whole run)."""
    from mmengine.optim.scheduler import CosineAnnealingLR, LinearLR

    recipe = recipe_for("paragraph/c1", tiny_world, tiny_encoder_cfg, epochs=2, warmup_steps=warmup_steps,
                        batch_size=16)
    cfg = recipe_to_mmengine_config(recipe, str(tmp_path))
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=recipe.train.lr)
    kinds = {"LinearLR": LinearLR, "CosineAnnealingLR": CosineAnnealingLR}
    schedulers = [kinds[c["type"]](optimizer, **{k: v for k, v in c.items() if k != "type"})
                  for c in cfg["param_scheduler"]]
    lrs = []
    for _ in range(max(warmup_steps, 1) + 1):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        for scheduler in schedulers:
            scheduler.step()
    assert max(lrs) == pytest.approx(recipe.train.lr, rel=1e-6)
    assert lrs[max(warmup_steps - 1, 0)] == pytest.approx(recipe.train.lr, rel=1e-6)


def test_schedule_is_warmup_then_cosine_in_iterations(tiny_world, tiny_encoder_cfg, tmp_path):
    recipe = recipe_for("paragraph/c1", tiny_world, tiny_encoder_cfg, epochs=2, warmup_steps=2, batch_size=16)
    cfg = recipe_to_mmengine_config(recipe, str(tmp_path))
    n = sum(1 for line in open(tiny_world["train"]) if line.strip())
    total = 2 * (n // 16)
    warm, cos = cfg["param_scheduler"]
    assert (warm["type"], warm["begin"], warm["end"], warm["by_epoch"]) == ("LinearLR", 0, 2, False)
    assert (cos["type"], cos["begin"], cos["end"], cos["T_max"]) == ("CosineAnnealingLR", 2, total, total - 2)
    runner = make_runner(recipe, tmp_path)
    lrs = []

    from mmengine.hooks import Hook

    class Record(Hook):
        def before_train_iter(self, runner, batch_idx, data_batch=None):
            lrs.append(runner.optim_wrapper.get_lr()["lr"][0])

    runner.register_hook(Record())
    runner.train()
    peak = recipe.train.lr
    assert lrs[0] == pytest.approx(peak * recipe.train.warmup_start_factor)
    assert max(lrs) == pytest.approx(peak, rel=1e-6) and lrs[-1] < peak / 2
    assert all(a >= b - 1e-12 for a, b in zip(lrs[2:], lrs[3:])), "cosine part must not increase"


def test_global_batch_is_split_over_processes(tiny_world, tiny_encoder_cfg, tmp_path):
    recipe = recipe_for("paragraph/c5", tiny_world, tiny_encoder_cfg, batch_size=16)
    assert recipe_to_mmengine_config(recipe, str(tmp_path), world_size=4)["train_dataloader"]["batch_size"] == 4
    from vlr_plugins.recipe import RecipeError

    with pytest.raises(RecipeError, match="train.batch_size: 16 does not split evenly over 3"):
        recipe_to_mmengine_config(recipe, str(tmp_path), world_size=3)


def test_missing_data_names_the_key(tiny_world, tiny_encoder_cfg, tmp_path):
    from vlr_plugins.recipe import RecipeError

    recipe = recipe_for("paragraph/c5", tiny_world, tiny_encoder_cfg)
    bad = recipe.replace(data=recipe.data.__class__(train=str(tmp_path / "nope.jsonl"),
                                                    image_embeddings=tiny_world["image_embeddings"]))
    with pytest.raises(RecipeError, match="data.train: no such file"):
        recipe_to_mmengine_config(bad, str(tmp_path))
