"""Recipe values given outside the recipe file, and where every value of a recipe came from.

A recipe is the merge of its ``_base_`` files, the file itself and any overrides
(``vlr train ... --set train.epochs=2 --train x.jsonl``). :class:`ValueSources` records,
for every key, the last layer that wrote it, so that an invalid value is blamed on the
place a user can fix: ``--set train.epochs: expected an integer, found 'two'`` rather
than the recipe file that never said ``two``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vlr_plugins.errors import UsageError
from vlr_plugins.recipe.errors import RecipeError, Source

__all__ = ["Overrides", "ValueSources", "parse_set_items"]


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


def parse_set_items(items: Sequence[str], *, option: str = "--set", example: str = "train.epochs=2") -> dict[str, Any]:
    """``["train.epochs=2", "data.train=x.jsonl"]`` -> nested dict (values parsed as YAML).

    The grammar of every ``--set`` option (``vlr train``, ``vlr generate``): a later item
    wins over an earlier one for the same key; an item may not reach inside a key that an
    earlier one set to a plain value (``a=1 a.b=2``). Errors are :class:`UsageError` naming
    ``option``; ``example`` is the item they show.
    """
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(option, f"expected KEY=VALUE such as {example}, found {item!r}")
        parts = key.split(".")
        if not all(p and p.strip() == p and " " not in p for p in parts):
            raise UsageError(option, f"{item!r}: expected a dotted key such as {example.partition('=')[0]}, "
                                     f"found {key!r}")
        node = out
        for depth, p in enumerate(parts[:-1]):
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                earlier = ".".join(parts[: depth + 1])
                raise UsageError(option, f"{item!r} sets a key inside {earlier}, which an earlier item set to "
                                         f"{node!r}; give one or the other")
        try:
            node[parts[-1]] = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            # the message of a MarkedYAMLError spans lines (it quotes the input); keep its gist
            problem = getattr(e, "problem", None) or " ".join(str(e).split())
            raise UsageError(option, f"{item!r}: the value is not valid YAML: {problem}") from None
    return out
