"""A recipe's loss and model arguments, checked against their constructors when it loads."""

from __future__ import annotations

import pytest
from _recipe_files import BASE, write

from vlr_plugins.recipe import RecipeError, load_recipe


@pytest.mark.parametrize(
    "loss, key, words",
    [
        ("{type: MultiPositiveInfoNCELoss, temperature: 0}", "loss.temperature", "temperature must be > 0"),
        ("{type: MultiPositiveInfoNCELoss, temperature: -0.07}", "loss.temperature", "found -0.07"),
        ("{type: MultiPositiveInfoNCELoss, temperature: cold}", "loss.temperature", "expected a number"),
        ("{type: MultiPositiveInfoNCELoss, temperature_range: [0.5, 0.1]}", "loss.temperature_range",
         "0 < low < high"),
        ("{type: MultiPositiveInfoNCELoss, temperature_range: 0.5}", "loss.temperature_range", "expected a list"),
        ("{type: MultiPositiveInfoNCELoss, variant: sum}", "loss.variant", "must be one of"),
        ("{type: MultiPositiveInfoNCELoss, learnable_temperature: yes please}", "loss.learnable_temperature",
         "expected true or false"),
        ("{type: MultiPositiveInfoNCELoss, learnable_temperature: true, temperature: 0.9}", "loss.temperature",
         "starts inside temperature_range"),
    ],
)
def test_loss_arguments_are_checked_when_the_recipe_loads(tmp_path, loss, key, words):
    p = write(tmp_path, "loss.yaml", BASE.replace("loss: {type: MultiPositiveInfoNCELoss}", f"loss: {loss}"))
    with pytest.raises(RecipeError) as e:
        load_recipe(p)
    assert str(e.value).startswith(f"{p}: {key}: ") and words in str(e.value)


def test_the_loss_a_recipe_builds_is_the_one_it_names(tmp_path):
    from vlr_plugins.registry import LOSSES

    p = write(tmp_path, "ok.yaml", BASE.replace("{type: MultiPositiveInfoNCELoss}",
                                                "{type: MultiPositiveInfoNCELoss, temperature: 0.05, variant: log_sum}"))
    r = load_recipe(p)
    built = LOSSES.build(r.loss)
    assert (built.temperature, built.variant) == (0.05, "log_sum")


@pytest.mark.parametrize(
    "model, key, words",
    [
        ("{type: BlipTextEncoder, pretrianed: x}", "model.pretrianed", "takes no argument 'pretrianed'"),
        ("{type: BlipTextEncoder, pretrained: x, embed_dim: wide}", "model.embed_dim", "expected an integer"),
        ("{type: BlipTextEncoder, config: [1, 2]}", "model.config", "expected a mapping"),
    ],
)
def test_a_registered_model_gets_only_arguments_it_takes(tmp_path, model, key, words):
    p = write(tmp_path, "model.yaml", BASE.replace("model: {type: BlipTextEncoder, pretrained: x}", f"model: {model}"))
    with pytest.raises(RecipeError) as e:
        load_recipe(p)
    assert str(e.value).startswith(f"{p}: {key}: ") and words in str(e.value)
