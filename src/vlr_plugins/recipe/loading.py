"""Recipe files: YAML read safely, ``_base_`` chains merged, shipped recipes found by name.

A file may start from others with ``_base_: other.yaml`` (a path relative to the
file, or a list of them); mappings are merged key by key, lists and scalars replace.
Each file is checked against the schema on its own, so an unknown key names the file
it was written in.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import yaml

from vlr_plugins._shipped import shipped_dirs
from vlr_plugins.recipe.errors import RecipeError
from vlr_plugins.recipe.schema import Recipe
from vlr_plugins.recipe.validation import SCHEMA, check_keys, recipe_from_dict

__all__ = ["load_recipe", "recipe_dirs", "list_recipes", "find_recipe"]


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
    except FileNotFoundError:
        raise RecipeError(path, "", "file not found") from None
    except yaml.YAMLError as e:
        raise RecipeError(path, "", f"not valid YAML: {e}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RecipeError(path, "", f"expected a mapping at top level, found {type(raw).__name__}")
    return raw


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _load_with_bases(path: Path, seen: tuple[Path, ...] = ()) -> tuple[dict[str, Any], list[Path]]:
    path = path.resolve()
    if path in seen:
        chain = " -> ".join(str(p) for p in (*seen, path))
        raise RecipeError(path, "_base_", f"circular _base_ chain: {chain}")
    raw = _read_yaml(path)
    bases = raw.pop("_base_", [])
    bases = [bases] if isinstance(bases, str) else bases
    if not isinstance(bases, list) or not all(isinstance(b, str) for b in bases):
        raise RecipeError(path, "_base_", "expected a path or a list of paths")
    # every file is checked against the schema on its own, so an unknown key names
    # the file it was written in, not the file that inherits it
    check_keys(raw, SCHEMA, path, "")
    merged: dict[str, Any] = {}
    files: list[Path] = []
    for b in bases:
        sub, sub_files = _load_with_bases(path.parent / b, (*seen, path))
        merged = _merge(merged, sub)
        files += sub_files
    return _merge(merged, raw), [*files, path]


def load_recipe(path_or_name: str | os.PathLike, overrides: dict[str, Any] | None = None) -> Recipe:
    """Load and validate a recipe file (or a shipped recipe by name, e.g. ``paragraph/c5``).

    ``overrides`` is a nested mapping merged on top before validation.
    """
    path = find_recipe(path_or_name)
    raw, _ = _load_with_bases(path)
    if overrides:
        check_keys(overrides, SCHEMA, Path("<overrides>"), "")
        raw = _merge(raw, overrides)
    return recipe_from_dict(raw, path)


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
    raise RecipeError(p, "", f"no such file, and no shipped recipe of that name "
                             f"(shipped: {', '.join(known) or 'none'})")
