"""The error of an invalid recipe: it names the file and the dotted key."""

from __future__ import annotations

import os

from vlr_plugins.errors import UserError

__all__ = ["RecipeError"]


class RecipeError(UserError, ValueError):
    """A recipe file is invalid; the message names the file and the dotted key."""

    def __init__(self, path: str | os.PathLike | None, key: str, message: str) -> None:
        self.path, self.key = (str(path) if path else "<recipe>"), key
        super().__init__(f"{self.path}: {key}: {message}" if key else f"{self.path}: {message}")
