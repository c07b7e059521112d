"""Model cards come from the recipe and the `vlr eval` JSON, and parse back as Hub metadata."""

from __future__ import annotations

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
