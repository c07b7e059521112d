"""Model cards come from the recipe and the `vlr eval` JSON, and parse back as Hub metadata."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("huggingface_hub")
from huggingface_hub import ModelCard  # noqa: E402

from vlr_plugins.hf.card import METRIC_NAMES, build_model_card, write_model_card  # noqa: E402
from vlr_plugins.recipe import load_recipe  # noqa: E402

EVAL = {
    "label": "c7",
    "budgets": {"flickr30k": 77, "docci": 128},
    "recall": {
        "flickr30k": {"i2t_r1": 25.04, "i2t_r5": 50.0, "i2t_r10": 61.0, "t2i_r1": 20.0, "t2i_r5": 40.0,
                      "t2i_r10": 52.0, "i2t_mean": 45.3, "t2i_mean": 37.3, "r_mean": 41.3},
        "docci": {"i2t_r1": 10.0, "i2t_r5": 20.0, "i2t_r10": 30.0, "t2i_r1": 11.0, "t2i_r5": 21.0,
                  "t2i_r10": 31.0, "i2t_mean": 20.0, "t2i_mean": 21.0, "r_mean": 20.5},
    },
}


def test_card_metadata_parses_back_to_the_eval_results(tmp_path):
    recipe = load_recipe("paragraph/c7").to_dict()
    card = build_model_card(recipe, model_name="blip-c7", repo_id="me/blip-c7", eval_results=EVAL, embed_dim=256)
    path = write_model_card(card, tmp_path)
    back = ModelCard.load(path)
    got = {(r.dataset_name, r.metric_type): r.metric_value for r in back.data.eval_results}
    want = {(b, m.replace("_", "-")): round(v, 2) for b, ms in EVAL["recall"].items()
            for m, v in ms.items() if m in METRIC_NAMES}
    assert got == want
    assert {r.metric_config for r in back.data.eval_results if r.dataset_name == "docci"} == {"128 tokens"}
    assert back.data.base_model == "Salesforce/blip-itm-base-coco" and "recipe-C7" in back.data.tags
    text = back.text
    # what was trained comes from the recipe itself
    assert "HardNegativeInfoNCELoss(temperature=0.07, hard_negative_scope=batch)" in text
    assert "hard_negatives (all, 77 tokens)" in text and "caption (all, 77 tokens)" in text
    assert "AutoModel.from_pretrained(\"me/blip-c7\", trust_remote_code=True)" in text
    assert "| blip-c7 | 25.0 |" in text
    assert recipe["reading"] in text


def test_card_without_results_and_with_a_data_fraction():
    recipe = load_recipe("paragraph/ablations/data25").to_dict()
    card = build_model_card(recipe, model_name="c5-25")
    assert card.data.eval_results is None and "## Results" not in card.text
    assert "25.0 % of the samples" in card.text


def test_the_loss_line_comes_from_the_trained_loss(tiny_world, tiny_encoder_cfg, tmp_path):
    """Trained with a learnable temperature: the card shows the learned value, not the
    recipe's initial one, and the defaults the recipe did not write."""
    pytest.importorskip("mmengine")
    import inspect
    import logging

    import torch
    from mmengine.config import Config
    from mmengine.runner import Runner

    from vlr_plugins.checkpoint_meta import read_checkpoint_meta
    from vlr_plugins.hf.card import card_files
    from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config
    from vlr_plugins.losses import MultiPositiveInfoNCELoss

    recipe = load_recipe("paragraph/c5", {
        "model": tiny_encoder_cfg,
        "loss": {"temperature": 0.07, "learnable_temperature": True},
        "data": {"train": tiny_world["train"], "image_embeddings": tiny_world["image_embeddings"]},
        "train": {"batch_size": 16, "epochs": 1, "warmup_steps": 1, "num_workers": 0, "lr": 1e-2},
    })
    Runner.from_cfg(Config(recipe_to_mmengine_config(recipe, str(tmp_path), log_level="WARNING"))).train()
    logging.getLogger("mmengine").handlers.clear()
    checkpoint = tmp_path / "epoch_1.pth"

    learned = torch.load(checkpoint, weights_only=True)["state_dict"]["loss_fn.temperature"].item()
    variant = inspect.signature(MultiPositiveInfoNCELoss).parameters["variant"].default
    card = card_files(read_checkpoint_meta(checkpoint), model_name="c5-learned")["README.md"]
    loss_row = next(line for line in card.splitlines() if line.startswith("| loss |"))
    assert f"temperature={float(f'{learned:.4g}')!r}," in loss_row and "temperature=0.07," not in loss_row
    assert f"variant={variant}" in loss_row and "learnable_temperature=True" in loss_row
    assert "as the recipe wrote it" not in loss_row

    # a checkpoint without the record: the recipe's mapping, and the card says so
    fallback = card_files({"vlr_recipe": recipe.to_dict()}, model_name="c5-old")["README.md"]
    loss_row = next(line for line in fallback.splitlines() if line.startswith("| loss |"))
    assert "temperature=0.07" in loss_row and "variant=" not in loss_row and "as the recipe wrote it" in loss_row


def test_eval_results_merge_later_files_first_and_bad_files_are_named(tmp_path):
    from vlr_plugins.errors import DataFormatError, MissingFileError
    from vlr_plugins.hf.card import merge_eval_results

    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text('{"recall": {"x": {"i2t_r1": 1.0}, "y": {"i2t_r1": 2.0}}, "budgets": {"x": 77, "y": 77}}')
    second.write_text('{"recall": {"y": {"i2t_r1": 3.0}}, "budgets": {"y": 128}}')
    assert merge_eval_results([first, second]) == {"recall": {"x": {"i2t_r1": 1.0}, "y": {"i2t_r1": 3.0}},
                                                   "budgets": {"x": 77, "y": 128}}
    assert merge_eval_results(None) == {"recall": {}, "budgets": {}}
    bad = tmp_path / "bad.json"
    bad.write_text('{"recall": ')
    with pytest.raises(DataFormatError, match=r"bad\.json, line 1: not valid JSON"):
        merge_eval_results([bad])
    with pytest.raises(MissingFileError, match="absent.json"):
        merge_eval_results([tmp_path / "absent.json"])


def test_re_normalised_results_are_named_so_in_the_card(tmp_path):
    from vlr_plugins.hf.card import merge_eval_results

    results = tmp_path / "results.json"
    results.write_text(json.dumps({"recall": {
        "msrvtt": {"i2t_r1": 40.0, "i2t_r5": 70.0, "t2i_r1": 45.5, "t2i_r5": 71.0,
                   "renorm": {"method": "dsl", "temperature": 100.0}},
        "coco": {"i2t_r1": 50.0, "i2t_r5": 80.0, "t2i_r1": 40.0, "t2i_r5": 60.0}}, "budgets": {"msrvtt": 77, "coco": 77}}))
    merged = merge_eval_results([results])
    assert merged["renorm"] == {"msrvtt": {"method": "dsl", "temperature": 100.0}}
    assert merged["recall"]["msrvtt"] == {"i2t_r1": 40.0, "i2t_r5": 70.0, "t2i_r1": 45.5, "t2i_r5": 71.0}
    card = build_model_card(load_recipe("paragraph/c5").to_dict(), model_name="c5", eval_results=merged)
    names = {(r.dataset_name, r.metric_name) for r in card.data.eval_results}
    assert ("msrvtt", "I2T R@1 (DSL)") in names and ("coco", "I2T R@1") in names
    configs = {r.dataset_name: r.metric_config for r in card.data.eval_results}
    assert "temperature 100" in configs["msrvtt"] and "re-normalised" not in configs["coco"]
    assert "msrvtt: Scores re-normalised with DSL (dual softmax, temperature 100)." in card.text


def test_named_and_pooled_views_read_in_the_card():
    import dataclasses

    from vlr_plugins.recipe import TextView, TextViews

    views = TextViews((TextView(("caption", "paragraph"), 64, "random", 1, name="summary"),
                       TextView("positives", 77, "first", 2)))
    recipe = dataclasses.replace(load_recipe("paragraph/c5"), text_views=views).to_dict()
    text = build_model_card(recipe, model_name="mv").text
    assert "summary: caption|paragraph (random 1, 64 tokens); positives (first 2, 77 tokens)" in text
    assert "summary 64, positives 77" in text


@pytest.mark.parametrize("name", ["mvc/mvc_b", "mvc/baseline_b"])
def test_a_video_text_pretraining_card_says_both_towers_were_trained(name):
    recipe = load_recipe(name).to_dict()
    card = build_model_card(recipe, model_name="mvc-b-text", architecture="dual-CLS BERT text encoder",
                            eval_results={"recall": {"msrvtt": {"i2t_r1": 38.0, "i2t_r5": 60.0, "t2i_r1": 40.0, "t2i_r5": 66.0}},
                                          "budgets": {"msrvtt": 128}})
    text = str(card)
    assert "pretrained jointly with\nits video tower (VTC + VTM + MLM" in text and "vlr:CHECKPOINT" in text
    assert "frozen, precomputed" not in text and "frozen vision side" not in text
    assert "Multi-View Captions" in text and "Paragraph is Worth" not in text
    assert "positives per video" in text
    assert card.data.tags[:2] == ["vlr-plugins", "video-text-retrieval"]
    assert card.data.eval_results[0].task_type == "video-text-retrieval"


def test_a_card_with_the_video_tower_bundled_retrieves_videos():
    recipe = load_recipe("mvc/mvc_b").to_dict()
    text = str(build_model_card(recipe, model_name="mvc-b", repo_id="me/mvc-b", video_tower=True))
    assert "The export carries both" in text and "not in this\nexport" not in text
    assert 'AutoVideoProcessor.from_pretrained("me/mvc-b", trust_remote_code=True)' in text
    assert "video_emb = model.get_video_features(**clips)" in text and "text_emb @ video_emb.T" in text
    # an image-text recipe has no video tower to show, whatever the flag says
    assert "get_video_features" not in str(build_model_card(load_recipe("paragraph/c5").to_dict(), model_name="c5",
                                                            video_tower=True))


def test_an_image_text_card_keeps_its_wording():
    text = str(build_model_card(load_recipe("paragraph/c5").to_dict(), model_name="c5"))
    assert "frozen, precomputed" in text and "Paragraph is Worth" in text and "Multi-View" not in text
