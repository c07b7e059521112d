"""Recipe -> MMEngine config: what the config alone can tell is checked before any Runner."""

from __future__ import annotations

import csv
import json

import pytest

pytest.importorskip("mmengine")
from vlr_plugins.data import read_paragraph_samples  # noqa: E402
from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config  # noqa: E402
from vlr_plugins.integrations.mmengine.config import count_samples  # noqa: E402
from vlr_plugins.recipe import RecipeError, load_recipe  # noqa: E402


def _recipe(tiny_world, model, **extra):
    return load_recipe("paragraph/c5", {
        "model": model, "train": {"batch_size": 16, "num_workers": 0},
        "data": {"train": tiny_world["train"], "image_embeddings": tiny_world["image_embeddings"]}, **extra})


def _user_model(tiny_world, **config):
    """A random-init encoder as a user writes it: no special-token ids."""
    tok = tiny_world["object"].tokenizer()
    cfg = dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
               intermediate_size=64, max_position_embeddings=160)
    cfg.update(config)
    return {"type": "BlipTextEncoder", "pretrained": None, "config": cfg, "embed_dim": 32,
            "tokenizer": tiny_world["tokenizer"]}


def test_special_token_ids_left_out_come_from_the_tokenizer(tiny_world, tmp_path):
    tok = tiny_world["object"].tokenizer()
    cfg = recipe_to_mmengine_config(_recipe(tiny_world, _user_model(tiny_world)), str(tmp_path))
    text = cfg["model"]["text_encoder"]["config"]
    assert (text["pad_token_id"], text["bos_token_id"], text["sep_token_id"]) == (
        tok.pad_token_id, tok.cls_token_id, tok.sep_token_id)
    given = recipe_to_mmengine_config(_recipe(tiny_world, _user_model(tiny_world, bos_token_id=4)), str(tmp_path))
    assert given["model"]["text_encoder"]["config"]["bos_token_id"] == 4


def test_the_encoder_built_from_it_warns_about_nothing(tiny_world, tmp_path, caplog):
    from vlr_plugins.registry import MODELS

    cfg = recipe_to_mmengine_config(_recipe(tiny_world, _user_model(tiny_world)), str(tmp_path))
    with caplog.at_level("WARNING"):
        MODELS.build(cfg["model"]["text_encoder"])
    assert not [r for r in caplog.records if "token_id" in r.getMessage()]


@pytest.mark.parametrize("change, key, words", [
    ({"max_position_embeddings": 100}, "text_views.positives[1].max_tokens", "128 tokens exceed the text encoder's 100"),
    ({"vocab_size": 20}, "model.config.vocab_size", "holds 20"),
    ({"sep_token_id": 500}, "model.config.sep_token_id", "500 is outside the vocabulary"),
])
def test_the_encoder_must_take_the_views_and_the_tokenizer(tiny_world, tmp_path, change, key, words):
    with pytest.raises(RecipeError) as e:
        recipe_to_mmengine_config(_recipe(tiny_world, _user_model(tiny_world, **change)), str(tmp_path))
    assert f"{key}: " in str(e.value) and words in str(e.value)


def test_an_eval_budget_past_the_positions_is_named(tiny_world, tmp_path):
    recipe = _recipe(tiny_world, _user_model(tiny_world),
                     eval=[{"name": "s", "ann_file": tiny_world["eval_short"], "max_tokens": 77},
                           {"name": "l", "ann_file": tiny_world["eval_long"], "max_tokens": 300}])
    with pytest.raises(RecipeError, match=r"eval\[1\].max_tokens: 300 tokens exceed"):
        recipe_to_mmengine_config(recipe, str(tmp_path))


def test_count_samples_counts_records_not_lines(tiny_world, tmp_path):
    samples = [json.loads(line) for line in open(tiny_world["train"])]
    p = tmp_path / "samples.csv"
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "caption", "paragraph"])
        for s in samples:
            w.writerow([s["id"], s["caption"], s["paragraph"].replace(". ", ".\n", 1)])  # a cell over two lines
    assert count_samples(str(p)) == len(read_paragraph_samples(p)) == len(samples)
    assert count_samples(tiny_world["train"]) == len(samples)
