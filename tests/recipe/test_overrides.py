"""Overrides and ValueSources: every recipe value is blamed on the layer that wrote it."""

from __future__ import annotations

import pytest
from _recipe_files import BASE, write

from vlr_plugins.recipe import Overrides, RecipeError, Source, ValueSources, load_recipe

FILE, SET, TRAIN = Source("my.yaml"), Source("--set", option=True), Source("--train", option=True, keyed=False)


def test_where_renders_files_and_options():
    assert FILE.where("train.epochs") == "my.yaml: train.epochs"
    assert FILE.where("") == "my.yaml"
    assert SET.where("train.epochs") == "--set train.epochs"
    assert TRAIN.where("data.train") == "--train (data.train)"
    assert str(RecipeError(SET, "train.epochs", "expected an integer")) == "--set train.epochs: expected an integer"
    assert str(RecipeError("my.yaml", "loss", "bad")) == "my.yaml: loss: bad"


def test_the_last_layer_to_write_a_key_owns_it():
    sources = ValueSources(FILE)
    sources.record({"train": {"epochs": 1, "lr": 0.1}, "text_views": {"positives": [{"field": "caption"}]}}, FILE)
    sources.record({"train": {"epochs": 2}}, SET)
    assert sources.of("train.epochs") == SET
    assert sources.of("train.lr") == FILE
    # a list is one value: whoever wrote it owns its items
    assert sources.of("text_views.positives[0].max_tokens") == FILE
    sources.record({"text_views": {"positives": []}}, SET)
    assert sources.of("text_views.positives[0].field") == SET
    # a mapping written over a plain value replaces it, and the reverse
    sources.record({"loss": 1}, FILE)
    sources.record({"loss": {"temperature": 0.1}}, SET)
    assert sources.of("loss.temperature") == SET and "loss" not in sources.by_key
    sources.record({"loss": 2}, TRAIN)
    assert sources.of("loss.temperature") == TRAIN and "loss.temperature" not in sources.by_key
    # a key nobody wrote: the one layer that wrote its parts, else the default
    assert sources.of("loss") == TRAIN
    assert sources.of("eval") == FILE


def test_an_invalid_value_names_the_option_that_gave_it(tmp_path):
    p = write(tmp_path, "mine.yaml", BASE)
    with pytest.raises(RecipeError) as e:
        load_recipe(p, [Overrides({"train": {"epochs": "two"}}, "--set")])
    assert str(e.value) == "--set train.epochs: expected an integer, found 'two'"
    with pytest.raises(RecipeError, match=r"^--set trian: unknown key"):
        load_recipe(p, Overrides({"trian": {"epochs": 1}}, "--set"))
    with pytest.raises(RecipeError, match=r"^--train \(data.train\): expected a string, found 3"):
        load_recipe(p, [Overrides({"data": {"train": 3}}, "--train", keyed=False)])
    # the same value written in the file is the file's
    bad = write(tmp_path, "bad.yaml", BASE + "train: {epochs: two}\n")
    with pytest.raises(RecipeError, match=rf"^{bad}: train.epochs: expected an integer"):
        load_recipe(bad, [Overrides({"train": {"lr": 0.1}}, "--set")])


def test_a_value_written_in_a_base_names_the_base(tmp_path):
    base = write(tmp_path, "base.yaml", BASE + "loss: {type: MultiPositiveInfoNCELoss, temperature: -1}\n")
    child = write(tmp_path, "child.yaml", "_base_: base.yaml\nname: child\n")
    with pytest.raises(RecipeError) as e:
        load_recipe(child)
    assert str(e.value).startswith(f"{base}: loss.temperature: ")


def test_a_plain_mapping_is_one_layer_and_the_recipe_remembers_its_sources(tmp_path):
    p = write(tmp_path, "mine.yaml", BASE)
    recipe = load_recipe(p, [Overrides({"train": {"epochs": 2}}, "--set"),
                             Overrides({"data": {"train": "x.jsonl"}}, "--train", keyed=False)])
    assert recipe.train.epochs == 2 and recipe.data.train == "x.jsonl"
    assert recipe.where("train.epochs") == "--set train.epochs"
    assert recipe.where("data.train") == "--train (data.train)"
    assert recipe.where("loss.type") == f"{p}: loss.type"
    assert str(recipe.error("data.train", "no such file")) == "--train (data.train): no such file"
    assert load_recipe(p, {"train": {"epochs": 3}}).where("train.epochs") == "overrides train.epochs"
    # where a value came from is no part of the recipe's content
    assert "sources" not in recipe.to_dict() and recipe == recipe.replace(sources=None)
