"""``register_for_auto_class`` for the length of one save (the exports' remote code)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["registered_for_auto_class"]


@contextlib.contextmanager
def registered_for_auto_class(*classes: tuple[type, str]) -> Iterator[None]:
    """``cls.register_for_auto_class(auto)`` for each ``(cls, auto)`` for the length of one save:
    it is class state, and a save with ``remote_code=False`` (or any other save in this
    process) must not write code."""
    before = [(cls, cls.__dict__.get("_auto_class")) for cls, _ in classes]
    try:
        for cls, auto in classes:
            cls.register_for_auto_class(auto)
        yield
    finally:
        for cls, value in before:
            if value is None:
                with contextlib.suppress(AttributeError):
                    delattr(cls, "_auto_class")
            else:
                cls._auto_class = value
