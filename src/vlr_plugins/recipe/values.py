"""Recipe values checked against simple type annotations, with errors naming the key."""

from __future__ import annotations

import collections.abc
import types
import typing
from pathlib import Path
from typing import Any, Literal

from vlr_plugins.recipe.errors import RecipeError

__all__ = ["typed_value"]


def typed_value(path: Path | str | None, key: str, value: Any, typ: Any) -> Any:
    """Check ``value`` against a simple annotation (int/float/bool/str/Optional/Literal/
    tuple/Sequence); other annotations accept anything."""
    origin = typing.get_origin(typ)
    args = typing.get_args(typ)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return typed_value(path, key, value, inner[0])
    if origin is Literal:
        if value not in args:
            raise RecipeError(path, key, f"expected one of {list(args)}, found {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise RecipeError(path, key, f"expected a list of {len(args)} numbers, found {value!r}")
        return tuple(typed_value(path, f"{key}[{i}]", x, a) for i, (x, a) in enumerate(zip(value, args)))
    if origin is dict or typ is dict:
        if not isinstance(value, dict):
            raise RecipeError(path, key, f"expected a mapping, found {value!r}")
        return value
    if origin in (collections.abc.Sequence, list):
        if not isinstance(value, (list, tuple)):
            raise RecipeError(path, key, f"expected a list, found {value!r}")
        return [typed_value(path, f"{key}[{i}]", x, args[0]) if args else x for i, x in enumerate(value)]
    if typ is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RecipeError(path, key, f"expected a number, found {value!r}")
        return float(value)
    if typ is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RecipeError(path, key, f"expected an integer, found {value!r}")
        return value
    if typ is bool:
        if not isinstance(value, bool):
            raise RecipeError(path, key, f"expected true or false, found {value!r}")
        return value
    if typ is str:
        if not isinstance(value, str):
            raise RecipeError(path, key, f"expected a string, found {value!r}")
        return value
    return value
