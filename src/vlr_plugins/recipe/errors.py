"""The error of an invalid recipe: it names where the value was written (the file, or
the command-line option that gave it) and the dotted key."""

from __future__ import annotations

import os
from dataclasses import dataclass

from vlr_plugins.errors import UserError

__all__ = ["RecipeError", "Source"]


@dataclass(frozen=True)
class Source:
    """Where recipe values were written: a file, or a command-line option.

    ``name``: the file's path, or the option (``--set``, ``--train``); ``option``: whether
    it is an option; ``keyed``: whether the option's items name their keys (``--set
    train.epochs=2`` does; ``--train x.jsonl`` sets one key, so its name is enough).

    :meth:`where` renders a location for a key: ``recipes/my.yaml: train.epochs``,
    ``--set train.epochs``, ``--train``.
    """

    name: str
    option: bool = False
    keyed: bool = True

    def where(self, key: str) -> str:
        if self.option:
            if not key:
                return self.name
            return f"{self.name} {key}" if self.keyed else f"{self.name} ({key})"
        return f"{self.name}: {key}" if key else self.name


class RecipeError(UserError, ValueError):
    """A recipe value is invalid; the message names where it was written and the dotted key.

    ``path`` is the recipe file (or a :class:`Source`: an option such as ``--set``);
    ``str(err)`` reads ``recipes/my.yaml: train.epochs: expected an integer, found 'two'``
    or ``--set train.epochs: expected an integer, found 'two'``. ``message`` is the problem
    alone, for re-raising it against another source.
    """

    def __init__(self, path: str | os.PathLike | Source | None, key: str, message: str) -> None:
        source = path if isinstance(path, Source) else Source(str(path) if path else "<recipe>")
        self.source, self.path, self.key, self.message = source, source.name, key, message
        super().__init__(f"{source.where(key)}: {message}")
