"""Recipe values given outside the recipe file, and where every value of a recipe came from.

A recipe is the merge of its ``_base_`` files, the file itself and any overrides
(``vlr train ... --set train.epochs=2 --train x.jsonl``). :class:`ValueSources` records,
for every key, the last layer that wrote it, so that an invalid value is blamed on the
place a user can fix: ``--set train.epochs: expected an integer, found 'two'`` rather
than the recipe file that never said ``two``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vlr_plugins.recipe.errors import RecipeError, Source

__all__ = ["Overrides", "ValueSources"]


@dataclass(frozen=True)
class Overrides:
    """A nested mapping of recipe values merged on top of a recipe, and its source.

    ``source`` is what errors name: an option (``--set``), or any label; ``keyed=False``
    for an option that sets one key and so needs no key in messages (``--train``).

    Example::

        load_recipe("paragraph/c5", [Overrides({"train": {"epochs": 2}}, "--set"),
                                     Overrides({"data": {"train": "x.jsonl"}}, "--train", keyed=False)])
    """

    values: Mapping[str, Any]
    source: str = "overrides"
    keyed: bool = True

    @property
    def as_source(self) -> Source:
        return Source(self.source, option=True, keyed=self.keyed)


_PARENT = re.compile(r"(\.|\[)[^.\[]*$")


@dataclass
class ValueSources:
    """Dotted key -> the :class:`Source` that last wrote it (mappings merge, anything else
    replaces, as recipe layers merge). ``default`` answers for keys no layer wrote."""

    default: Source
    by_key: dict[str, Source] = field(default_factory=dict)

    def record(self, raw: Mapping[str, Any], source: Source, prefix: str = "") -> None:
        """Note that ``source`` wrote every key of ``raw`` (merged on top of what was there)."""
        for k, v in raw.items():
            key = f"{prefix}{k}"
            # a scalar written where a mapping was (or the reverse) replaces all of it
            self.by_key.pop(key, None)
            if isinstance(v, Mapping):
                self.record(v, source, key + ".")
            else:
                for old in [o for o in self.by_key if o.startswith((key + ".", key + "["))]:
                    del self.by_key[old]
                self.by_key[key] = source

    def of(self, key: str) -> Source:
        """Who wrote ``key``: the layer that wrote it or the list / value holding it
        (``text_views.positives[1].max_tokens`` -> whoever wrote ``text_views.positives``);
        else, for a key whose parts were written by one other layer alone, that layer."""
        k = key
        while k:
            if k in self.by_key:
                return self.by_key[k]
            k = _PARENT.sub("", k) if _PARENT.search(k) else ""
        under = {s for o, s in self.by_key.items() if o.startswith((key + ".", key + "["))}
        if len(under) == 1 and key:
            return under.pop()
        return self.default

    def where(self, key: str) -> str:
        """``recipes/my.yaml: train.epochs``, ``--set train.epochs`` or ``--train``."""
        return self.of(key).where(key)

    def error(self, key: str, message: str) -> RecipeError:
        """A :class:`~vlr_plugins.recipe.RecipeError` for ``key``, blamed on who wrote it."""
        return RecipeError(self.of(key), key, message)
