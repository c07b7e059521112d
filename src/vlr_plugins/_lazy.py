"""Package attributes imported on first use, so a package's import stays light."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, table: Mapping[str, str], names: list[str], *,
                 on_load: Callable[[], object] | None = None
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` / ``__dir__`` for ``package``: ``table`` maps a name to its module.

    ``on_load`` runs each time a name is first looked up, after its module is imported and
    before the name is kept in ``package`` (open_clip's integration registers its model
    configs then); it should be cheap to call again.
    """
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(table[name]), name)
        if on_load is not None:
            on_load()
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
