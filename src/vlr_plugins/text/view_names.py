"""The caption views of MVC's dual-CLS text encoder, apart from the model
(:mod:`vlr_plugins.text.dual_cls`) so that a recipe is checked without torch."""

from __future__ import annotations

__all__ = ["VIEWS"]

#: the caption views, in ``view_ids`` order: ``view_ids == 0`` is a summary caption, ``1`` a detailed one
VIEWS: tuple[str, ...] = ("summary", "detailed")
