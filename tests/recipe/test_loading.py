"""Recipe files: every shipped one loads with the paper's values; _base_ chains; file errors."""

from __future__ import annotations

import pytest
from _recipe_files import BASE, write

from vlr_plugins.recipe import RecipeError, TextView, list_recipes, load_recipe


def test_every_shipped_recipe_loads_with_the_papers_hyperparameters():
    recipes = list_recipes()
    names = {f"paragraph/c{i}" for i in range(1, 11)}
    names |= {f"paragraph/ablations/{a}{n}" for a in ("pos", "neg") for n in (1, 3, 5)}
    names |= {f"paragraph/ablations/data{f}" for f in (25, 50, 75, 100)}
    assert names <= set(recipes)
    for name in names:
        r = load_recipe(name)
        assert (r.train.lr, r.train.batch_size, r.train.epochs, r.train.warmup_steps) == (1e-5, 256, 10, 500)
        assert r.loss["temperature"] == 0.07 and r.train.schedule == "cosine"
        budgets = {v.field: v.max_tokens for v in (*r.text_views.positives, *r.text_views.negatives)}
        assert all(budgets[f] == 77 for f in budgets if f != "paragraph")
        assert budgets.get("paragraph", 128) == 128


def test_paper_configs_have_the_described_views():
    c5 = load_recipe("paragraph/c5")
    assert [v.field for v in c5.text_views.positives] == ["caption", "paragraph"]
    assert c5.loss["type"] == "MultiPositiveInfoNCELoss"
    c2 = load_recipe("paragraph/c2")
    assert c2.text_views.positives == (TextView("positives", 77, "random", 1),)
    c7 = load_recipe("paragraph/c7")
    assert c7.loss["type"] == "HardNegativeInfoNCELoss" and c7.text_views.negatives[0].field == "hard_negatives"
    assert load_recipe("paragraph/c9").text_views.max_positives is None  # takes all generated captions
    assert load_recipe("paragraph/c10").text_views.max_positives == 3
    for name in ("paragraph/c6", "paragraph/c10", "paragraph/c7"):
        assert load_recipe(name).reading, f"{name} must record how it was read"
    assert load_recipe("paragraph/ablations/data25").data.fraction == 0.25
    assert load_recipe("paragraph/ablations/neg3").text_views.negatives[0].count == 3


def test_base_inheritance_and_overrides(tmp_path):
    write(tmp_path, "base.yaml", BASE + "train: {epochs: 3, lr: 0.001}\n")
    child = write(tmp_path, "child.yaml", """
        _base_: base.yaml
        name: child
        train: {epochs: 5}
    """)
    r = load_recipe(child)
    assert (r.name, r.train.epochs, r.train.lr) == ("child", 5, 0.001)
    r = load_recipe(child, {"train": {"batch_size": 8}, "data": {"fraction": 0.5}})
    assert (r.train.batch_size, r.train.epochs, r.data.fraction) == (8, 5, 0.5)


def test_unknown_key_in_a_base_names_the_base(tmp_path):
    base = write(tmp_path, "base.yaml", BASE + "modle: {}\n")
    child = write(tmp_path, "child.yaml", "_base_: base.yaml\nname: c\n")
    with pytest.raises(RecipeError) as e:
        load_recipe(child)
    assert str(e.value).startswith(str(base)) and "modle" in str(e.value)


def test_circular_base_and_missing_file(tmp_path):
    write(tmp_path, "a.yaml", "_base_: b.yaml\n")
    write(tmp_path, "b.yaml", "_base_: a.yaml\n")
    with pytest.raises(RecipeError, match="circular"):
        load_recipe(tmp_path / "a.yaml")
    with pytest.raises(RecipeError, match="file not found"):
        load_recipe(tmp_path / "nope.yaml")
    with pytest.raises(RecipeError, match="no shipped recipe"):
        load_recipe("paragraph/c99")


def test_not_yaml_is_reported(tmp_path):
    p = write(tmp_path, "broken.yaml", "name: [unclosed\n")
    with pytest.raises(RecipeError, match="not valid YAML"):
        load_recipe(p)
