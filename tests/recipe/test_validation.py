"""Recipe validation: bad keys, values and views name the file and key; loss vs views."""

from __future__ import annotations

import pytest
from _recipe_files import BASE, write

from vlr_plugins.recipe import RecipeError, TextView, TextViews, build_text_views, check_loss_against_views, load_recipe


@pytest.mark.parametrize(
    "patch, key, words",
    [
        ("trian: {epochs: 1}", "trian", "unknown key"),
        ("train: {epochz: 1}", "train.epochz", "unknown key"),
        ("train: {epochs: two}", "train.epochs", "expected an integer"),
        ("data: {fraction: 1.5}", "data.fraction", "0 < fraction <= 1"),
        ("loss: {type: NoSuchLoss}", "loss.type", "unknown loss"),
        ("loss: {type: MultiPositiveInfoNCELoss, temprature: 0.1}", "loss.temprature", "takes no argument"),
    ],
)
def test_bad_keys_and_values_name_file_and_key(tmp_path, patch, key, words):
    p = write(tmp_path, "bad.yaml", BASE + patch + "\n")
    with pytest.raises(RecipeError) as e:
        load_recipe(p)
    assert str(p) in str(e.value) and f": {key}:" in str(e.value) and words in str(e.value)


@pytest.mark.parametrize(
    "views, key, words",
    [
        ("- {field: summary, max_tokens: 77}", "text_views.positives[0].field", "no text field 'summary'"),
        ("- {field: paragraph}", "text_views.positives[0].max_tokens", "missing token budget"),
        ("- {field: positives, take: random, max_tokens: 77}", "text_views.positives[0].count", "needs count"),
        ("- {field: caption, take: first, count: 2, max_tokens: 77}", "text_views.positives[0].count", "holds one text"),
        ("- {field: caption, max_tokens: 77, colour: red}", "text_views.positives[0].colour", "unknown key"),
    ],
)
def test_bad_views_name_file_and_key(tmp_path, views, key, words):
    text = f"""
        name: v
        text_views:
          positives:
            {views}
        loss: {{type: MultiPositiveInfoNCELoss}}
        model: {{type: BlipTextEncoder}}
    """
    p = write(tmp_path, "views.yaml", text)
    with pytest.raises(RecipeError) as e:
        load_recipe(p)
    assert f"{p}: {key}:" in str(e.value) and words in str(e.value)


def test_loss_must_fit_the_views(tmp_path):
    two = write(tmp_path, "two.yaml", BASE.replace("MultiPositiveInfoNCELoss", "InfoNCELoss").replace(
        "- {field: caption, max_tokens: 77}", "- {field: caption, max_tokens: 77}\n    - {field: paragraph, max_tokens: 128}"))
    with pytest.raises(RecipeError, match="exactly one positive"):
        load_recipe(two)
    no_neg = write(tmp_path, "noneg.yaml", BASE.replace("MultiPositiveInfoNCELoss", "HardNegativeInfoNCELoss"))
    with pytest.raises(RecipeError, match="text_views.negatives: .*needs hard-negative views"):
        load_recipe(no_neg)
    with_neg = write(tmp_path, "withneg.yaml", BASE.replace(
        "loss:", "  negatives:\n    - {field: hard_negatives, max_tokens: 77}\nloss:"))
    with pytest.raises(RecipeError, match="MultiPositiveInfoNCELoss ignores hard negatives"):
        load_recipe(with_neg)


def test_a_view_may_pool_candidate_fields_and_carry_a_name(tmp_path):
    p = write(tmp_path, "mv.yaml", BASE.replace(
        "- {field: caption, max_tokens: 77}",
        "- {field: [caption, paragraph], take: random, count: 1, max_tokens: 77, name: summary}"))
    view = load_recipe(p).text_views.positives[0]
    assert view == TextView(("caption", "paragraph"), 77, "random", 1, name="summary")
    assert load_recipe(p).text_views.max_positives == 1


@pytest.mark.parametrize(
    "field, words",
    [("[]", "expected a field name or a list"), ("[caption, summary]", "no text field 'summary'"),
     ("[caption, caption]", "named twice"), ("[caption, 3]", "expected a field name or a list")],
)
def test_bad_candidate_sets_are_named(tmp_path, field, words):
    p = write(tmp_path, "mv.yaml", BASE.replace("{field: caption,", f"{{field: {field},"))
    with pytest.raises(RecipeError, match=rf"{p}: text_views.positives\[0\].field: .*{words}"):
        load_recipe(p)


def test_text_views_built_alone_check_their_own_keys():
    views = build_text_views({"positives": [{"field": "caption", "max_tokens": 77}]}, "cli")
    assert views == TextViews((TextView("caption", 77),))
    with pytest.raises(RecipeError, match=r"^cli: text_views.positives\[0\].colour: unknown key"):
        build_text_views({"positives": [{"field": "caption", "max_tokens": 77, "colour": "red"}]}, "cli")
    with pytest.raises(RecipeError, match=r"^cli: text_views.positive: unknown key"):
        build_text_views({"positive": []}, "cli")
    with pytest.raises(RecipeError, match=r"^cli: text_views.positives: expected a list"):
        build_text_views({"positives": {"field": "caption"}}, "cli")


def test_the_loss_check_names_a_trainer_s_own_keys():
    two = TextViews((TextView("caption", 77), TextView("paragraph", 128)))
    check_loss_against_views({"type": "MultiPositiveInfoNCELoss"}, two, "run.yaml")
    with pytest.raises(RecipeError, match=r"^run.yaml: datasets.d.text_views.positives: InfoNCELoss expects"):
        check_loss_against_views({"type": "InfoNCELoss"}, two, "run.yaml", loss_key="model.loss",
                                 views_key="datasets.d.text_views")
    with pytest.raises(RecipeError, match=r"^run.yaml: model.loss.temprature: .*takes no argument"):
        check_loss_against_views({"type": "InfoNCELoss", "temprature": 1}, two, "run.yaml", loss_key="model.loss")
    with pytest.raises(RecipeError, match=r"^run.yaml: model.loss.type: unknown loss 'Nope'"):
        check_loss_against_views({"type": "Nope"}, two, "run.yaml", loss_key="model.loss")


@pytest.mark.parametrize(
    "text, words",
    [
        ("name: [unclosed\n", "not valid YAML: line 2"),
        (b"name: caf\xe9\n", "not UTF-8"),
        ("- a\n- b\n", "expected a mapping at top level"),
    ],
)
def test_a_file_that_is_no_recipe_is_one_line(tmp_path, text, words):
    p = tmp_path / "r.yaml"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(RecipeError) as e:
        load_recipe(p)
    assert str(e.value).startswith(f"{p}: ") and words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("train, key, words", [
    ("{lr: 0}", "train.lr", "expected > 0"),
    ("{weight_decay: -0.1}", "train.weight_decay", "expected >= 0"),
    ("{warmup_start_factor: 0}", "train.warmup_start_factor", "0 < factor <= 1"),
    ("{betas: [1.5, 0.999]}", "train.betas[0]", "0 <= beta < 1"),
    ("{max_keep_checkpoints: 0}", "train.max_keep_checkpoints", "-1 to keep all"),
    ("{lr: 0.001, min_lr: 0.01}", "train.min_lr", "above train.lr"),
    ("{num_workers: -2}", "train.num_workers", "expected >= 0"),
])
def test_optimisation_values_a_trainer_would_refuse_are_named(tmp_path, train, key, words):
    p = write(tmp_path, "train.yaml", BASE + f"train: {train}\n")
    with pytest.raises(RecipeError) as e:
        load_recipe(p)
    assert str(e.value).startswith(f"{p}: {key}: ") and words in str(e.value)
