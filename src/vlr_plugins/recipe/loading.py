"""Recipe files: YAML read safely, ``_base_`` chains merged, shipped recipes found by name.

A file may start from others with ``_base_: other.yaml`` (a path relative to the
file, or a list of them); mappings are merged key by key, lists and scalars replace.
Each file is checked against the schema on its own, so an unknown key names the file
it was written in; an invalid value names the file, ``_base_`` or option
(:class:`~vlr_plugins.recipe.Overrides`) that wrote it.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from vlr_plugins._io import read_yaml
from vlr_plugins._shipped import shipped_dirs
from vlr_plugins.recipe.errors import RecipeError, Source
from vlr_plugins.recipe.overrides import Overrides, ValueSources
from vlr_plugins.recipe.schema import Recipe
from vlr_plugins.recipe.validation import SCHEMA, check_keys, recipe_from_dict

__all__ = ["load_recipe", "recipe_description", "recipe_dirs", "list_recipes", "find_recipe"]


def _read_yaml(path: Path, shown: Path) -> dict[str, Any]:
    """The mapping in ``path``; errors name it as ``shown``."""
    try:
        raw = read_yaml(path)
    except FileNotFoundError:
        raise RecipeError(shown, "", "file not found") from None
    except IsADirectoryError:
        raise RecipeError(shown, "", "is a folder, expected a recipe YAML file") from None
    except UnicodeDecodeError as e:
        raise RecipeError(shown, "", f"not UTF-8 text (byte {e.start}): expected a recipe YAML file") from None
    except yaml.YAMLError as e:
        # a MarkedYAMLError's text spans lines (it quotes the input): keep its gist and position
        mark = getattr(e, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(e, "problem", None) or " ".join(str(e).split())
        raise RecipeError(shown, "", f"not valid YAML: {at}{problem}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RecipeError(shown, "", f"expected a mapping at top level, found {type(raw).__name__}")
    return raw


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _load_with_bases(path: Path, sources: ValueSources,
                     seen: tuple[Path, ...] = ()) -> tuple[dict[str, Any], list[Path]]:
    """The merged mapping of ``path`` and its ``_base_`` chain; ``sources`` records, in merge
    order, which file wrote each key."""
    shown = path if not seen else path.resolve()  # the top file as the user wrote it
    path = path.resolve()
    if path in seen:
        chain = " -> ".join(str(p) for p in (*seen, path))
        raise RecipeError(path, "_base_", f"circular _base_ chain: {chain}")
    raw = _read_yaml(path, shown)
    bases = raw.pop("_base_", [])
    bases = [bases] if isinstance(bases, str) else bases
    if not isinstance(bases, list) or not all(isinstance(b, str) for b in bases):
        raise RecipeError(shown, "_base_", "expected a path or a list of paths")
    # every file is checked against the schema on its own, so an unknown key names
    # the file it was written in, not the file that inherits it
    check_keys(raw, SCHEMA, shown, "")
    merged: dict[str, Any] = {}
    files: list[Path] = []
    for b in bases:
        if not (path.parent / b).is_file():
            raise RecipeError(shown, "_base_", f"no such file: {path.parent / b}")
        sub, sub_files = _load_with_bases(path.parent / b, sources, (*seen, path))
        merged = _merge(merged, sub)
        files += sub_files
    sources.record(raw, Source(str(shown)))
    return _merge(merged, raw), [*files, path]


def _layers(overrides: Mapping[str, Any] | Overrides | Sequence[Overrides] | None) -> list[Overrides]:
    if overrides is None:
        return []
    if isinstance(overrides, Overrides):
        return [overrides]
    if isinstance(overrides, Mapping):
        return [Overrides(overrides)]
    return list(overrides)


def load_recipe(
    path_or_name: str | os.PathLike,
    overrides: Mapping[str, Any] | Overrides | Sequence[Overrides] | None = None,
) -> Recipe:
    """Load and validate a recipe file (or a shipped recipe by name, e.g. ``paragraph/c5``).

    ``overrides`` are merged on top before validation, in order: a nested mapping, or
    :class:`~vlr_plugins.recipe.Overrides` that also say where the values came from
    (``--set``), so that an unknown key or an invalid value is blamed on them rather
    than on the file. Errors are :class:`RecipeError` naming where the value was
    written and the dotted key.
    """
    path = find_recipe(path_or_name)
    sources = ValueSources(Source(str(path)))
    raw, _ = _load_with_bases(path, sources)
    for layer in _layers(overrides):
        where = layer.as_source
        if not isinstance(layer.values, Mapping):
            raise RecipeError(where, "", f"expected a mapping of recipe keys, found {type(layer.values).__name__}")
        check_keys(dict(layer.values), SCHEMA, where, "")
        raw = _merge(raw, dict(layer.values))
        sources.record(layer.values, where)
    try:
        recipe = recipe_from_dict(raw, path)
    except RecipeError as e:
        # validation names the recipe file; the value may have been written elsewhere
        blamed = sources.of(e.key)
        if blamed == e.source or e.source.name != str(path):
            raise
        raise RecipeError(blamed, e.key, e.message) from None
    return recipe.replace(sources=sources)


def recipe_description(path_or_name: str | os.PathLike) -> str:
    """A recipe's ``description`` (its ``_base_`` chain merged, every file's keys checked) without
    validating its values, which needs the registered losses and models (torch): what
    ``vlr list recipes`` shows. A recipe with a bad value still fails :func:`load_recipe`."""
    path = find_recipe(path_or_name)
    raw, _ = _load_with_bases(path, ValueSources(Source(str(path))))
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise RecipeError(path, "description", f"expected a string, found {type(description).__name__}")
    return description


def recipe_dirs() -> list[Path]:
    """Folders holding shipped recipes: the installed wheel's, else the source tree's."""
    return shipped_dirs("recipes")


def _natural(p: Path) -> list:
    """Sort key putting c2 before c10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.as_posix())]


def list_recipes() -> dict[str, Path]:
    """Shipped recipes by name (``paragraph/c5``), skipping ``_base`` files."""
    out: dict[str, Path] = {}
    for root in recipe_dirs():
        for p in sorted(root.rglob("*.yaml"), key=_natural):
            rel = p.relative_to(root).with_suffix("").as_posix()
            if any(part.startswith("_") for part in rel.split("/")):
                continue
            out.setdefault(rel, p)
    return out


def find_recipe(path_or_name: str | os.PathLike) -> Path:
    p = Path(path_or_name)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return p
    known = list_recipes()
    if str(path_or_name) in known:
        return known[str(path_or_name)]
    close = difflib.get_close_matches(str(path_or_name), list(known), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise RecipeError(p, "", f"no such file, and no shipped recipe of that name ({hint}`vlr list recipes` "
                             "shows them)")
