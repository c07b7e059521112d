"""The recipe switches of gradient caching and label smoothing: ``loss.cache_chunk`` and
``loss.label_smoothing`` are loss arguments, checked before anything runs."""

from __future__ import annotations

import pytest

from vlr_plugins.recipe import RecipeError, load_recipe
from vlr_plugins.registry import LOSSES


@pytest.mark.parametrize("loss", [
    {"cache_chunk": 32, "label_smoothing": 0.1},
    {"type": "CachedMultiPositiveInfoNCELoss", "cache_chunk": 8},
])
def test_accepted_and_built(loss):
    recipe = load_recipe("paragraph/c5", {"loss": loss})
    built = LOSSES.build(recipe.loss)
    assert built.cache_chunk == loss["cache_chunk"]
    assert built.label_smoothing == loss.get("label_smoothing", 0.0)


def test_long_clip_smooths_by_a_tenth():
    assert load_recipe("open_clip/long_clip").loss["label_smoothing"] == 0.1


@pytest.mark.parametrize("loss, key, message", [
    ({"cache_chunk": 0}, "loss.cache_chunk", r"cache_chunk must be an integer >= 1 .* found 0"),
    ({"cache_chunk": "big"}, "loss.cache_chunk", r"expected an integer, found 'big'"),
    ({"label_smoothing": 2.0}, "loss.label_smoothing", r"label_smoothing must be a number in \[0, 1\]"),
])
def test_bad_values_name_the_key(loss, key, message):
    with pytest.raises(RecipeError, match=rf"{key}: .*{message}"):
        load_recipe("paragraph/c5", {"loss": loss})
