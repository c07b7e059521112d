"""The loss and the model a recipe names: their arguments checked against the registered
constructors -- names, annotated types and, for a loss, the constructor's own checks --
so that ``temperature: 0`` is reported as ``loss.temperature`` when the recipe loads,
not when a trainer first builds the loss."""

from __future__ import annotations

import inspect
import os
import re
import typing
from typing import Any

from vlr_plugins.data.text_views import TextViews
from vlr_plugins.recipe.errors import RecipeError
from vlr_plugins.recipe.values import typed_value

__all__ = ["check_loss_against_views", "check_model_arguments", "TOKENIZER_ARGUMENTS"]

#: constructor arguments that a loss with ``from_tokenizer`` (``VideoTextPretrainingLoss``:
#: MLM's vocabulary, mask and special ids) takes from the tokenizer when the trainer builds it;
#: a recipe leaves them out
TOKENIZER_ARGUMENTS = ("vocab_size", "mask_id", "special_ids")
#: what stands in for them while a recipe is checked (the loss is built only to check the rest)
_STAND_IN = {"vocab_size": 2**20, "mask_id": 0, "special_ids": []}


def check_loss_against_views(
    loss: dict[str, Any],
    views: TextViews,
    path: str | os.PathLike | None,
    *,
    loss_key: str = "loss",
    views_key: str = "text_views",
) -> None:
    """Check that ``loss`` (``{type: <registered loss>, ...arguments}``) names a registered
    loss, passes it only arguments it takes, and can consume what ``views`` give (one
    positive per sample for a single-positive loss; hard negatives exactly when the loss
    takes them). Errors are :class:`RecipeError` naming ``path`` and ``loss_key`` /
    ``views_key`` (a trainer's own config keys, e.g. ``model.loss`` in a LAVIS config)."""
    from vlr_plugins.registry import LOSSES

    if not isinstance(loss, dict) or "type" not in loss:
        raise RecipeError(path, f"{loss_key}.type", "missing: name a registered loss (vlr list losses)")
    if loss["type"] not in LOSSES:
        raise RecipeError(path, f"{loss_key}.type",
                          f"unknown loss {loss['type']!r}; registered: {', '.join(LOSSES.names())}")
    cls = LOSSES.get(loss["type"])
    params = inspect.signature(cls).parameters
    for k in loss:
        if k != "type" and k not in params:
            raise RecipeError(path, f"{loss_key}.{k}",
                              f"{loss['type']} takes no argument {k!r} (it takes: {', '.join(params)})")
    args = {k: v for k, v in loss.items() if k != "type"}
    stand_in: dict[str, Any] = {}
    if callable(getattr(cls, "from_tokenizer", None)):
        for k in TOKENIZER_ARGUMENTS:
            if k in args:
                raise RecipeError(path, f"{loss_key}.{k}", f"{loss['type']} takes {k} from the tokenizer "
                                                           "(its from_tokenizer); leave it out of the recipe")
        stand_in = {k: v for k, v in _STAND_IN.items() if k in params}
    _check_arguments(cls, args, path, loss_key, stand_in)
    if getattr(cls, "single_positive", False) and views.max_positives != 1:
        raise RecipeError(path, f"{views_key}.positives",
                          f"{loss['type']} expects exactly one positive per image; these views give "
                          f"{views.max_positives or 'several'} (use MultiPositiveInfoNCELoss)")
    if getattr(cls, "requires_negatives", False) and not views.negatives:
        raise RecipeError(path, f"{views_key}.negatives", f"{loss['type']} needs hard-negative views")
    if views.negatives and not getattr(cls, "accepts_negatives", False):
        raise RecipeError(path, f"{views_key}.negatives",
                          f"{loss['type']} ignores hard negatives; use HardNegativeInfoNCELoss")


def check_model_arguments(model: dict[str, Any], path: str | os.PathLike | None, key: str = "model") -> None:
    """A registered model (``vlr list models``: a text encoder, a video tower) gets only
    arguments it takes, each of its annotated type; building it (weights, a download) is
    left to the trainer. Other ``type`` values belong to one trainer (``open_clip``), which
    checks them. Errors name ``key.<argument>`` (``model.embed_dim``, ``video.encoder.width``)."""
    from vlr_plugins.registry import MODELS

    if not isinstance(model["type"], str) or model["type"] not in MODELS:
        return
    cls = MODELS.get(model["type"])
    params = inspect.signature(cls).parameters
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:
        hints = {}
    for k, v in model.items():
        if k == "type":
            continue
        if k not in params:
            raise RecipeError(path, f"{key}.{k}",
                              f"{model['type']} takes no argument {k!r} (it takes: {', '.join(params)})")
        if k in hints:
            typed_value(path, f"{key}.{k}", v, hints[k])


def _check_arguments(cls: type, args: dict[str, Any], path: str | os.PathLike | None, key: str,
                     stand_in: dict[str, Any] | None = None) -> None:
    """Check ``cls(**args)`` before anything runs: each argument against its annotation,
    then the constructor's own checks, whose ``ValueError`` / ``TypeError`` is reported
    under ``key.<the argument it names>`` (``loss.temperature``), else under ``key``.
    ``stand_in``: values for arguments the trainer fills in later (not checked)."""
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # an annotation that does not resolve here: check values only by building
        hints = {}
    for name, value in args.items():
        if name in hints:
            typed_value(path, f"{key}.{name}", value, hints[name])
    try:
        cls(**{**(stand_in or {}), **args})
    except (ValueError, TypeError) as e:
        message = str(e)
        params = list(inspect.signature(cls).parameters)
        named = [n for n in (*args, *params) if re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", message)]
        raise RecipeError(path, f"{key}.{named[0]}" if named else key, message) from None
