"""Trainer-neutral recipes: YAML files validated into :class:`Recipe`.

A recipe says *what* is trained (model, text views, loss, hyperparameters); the
MMEngine, LAVIS and open_clip integrations each translate the same recipe into their
own configs. The format is documented in ``docs/recipes.md``.

Loading is strict: an unknown key, a value of the wrong type, a text field that
training samples do not have, a view without a token budget, a loss argument the loss
refuses (``temperature: 0``), or a loss that cannot consume the views is an error naming
where the value was written -- the file, a ``_base_``, an option such as ``--set`` --
and the dotted key (``RecipeError``).

* :mod:`~vlr_plugins.recipe.schema` -- what a recipe holds (dataclasses);
* :mod:`~vlr_plugins.recipe.loading` -- YAML files, ``_base_`` chains, shipped recipes by name;
* :mod:`~vlr_plugins.recipe.overrides` -- values given outside the file (``--set``), and
  where every value came from, so that errors blame the place a user can fix;
* :mod:`~vlr_plugins.recipe.validation` -- the checks of keys, views and values;
* :mod:`~vlr_plugins.recipe.video_text` -- what a video-text (``data.schema: mvc``) recipe
  must hold, and what the others may not;
* :mod:`~vlr_plugins.recipe.arguments` -- the loss and model arguments against their
  constructors, including :func:`check_loss_against_views`, which the trainers' own
  config formats reuse;
* :mod:`~vlr_plugins.recipe.values` -- a value against its type annotation.

The names below are resolved on first use: a command that reads only ``--set`` items
(:mod:`~vlr_plugins.recipe.overrides`) imports no more of the package.
"""

from __future__ import annotations

from vlr_plugins._lazy import lazy_exports

__all__ = [
    "RecipeError",
    "Source",
    "Overrides",
    "ValueSources",
    "TextView",
    "TextViews",
    "DataSpec",
    "HardNegativeBatching",
    "VideoSpec",
    "EvalSplit",
    "TrainSpec",
    "Recipe",
    "load_recipe",
    "recipe_dirs",
    "list_recipes",
    "find_recipe",
    "build_text_views",
    "check_loss_against_views",
    "recipe_from_dict",
]

_LAZY = {name: f"vlr_plugins.recipe.{module}" for module, names in {
    "arguments": ("check_loss_against_views",),
    "errors": ("RecipeError", "Source"),
    "loading": ("find_recipe", "list_recipes", "load_recipe", "recipe_dirs"),
    "overrides": ("Overrides", "ValueSources"),
    "schema": ("DataSpec", "EvalSplit", "HardNegativeBatching", "Recipe", "TextView", "TextViews", "TrainSpec",
               "VideoSpec"),
    "validation": ("build_text_views", "recipe_from_dict"),
}.items() for name in names}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
