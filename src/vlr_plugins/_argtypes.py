"""argparse value types shared by every ``vlr`` subcommand (a bad value is an argparse
error naming the option, status 2)."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def at_least(low: float, kind: type = int) -> Callable[[str], int | float]:
    """An argparse ``type``: a ``kind`` (int or float) value >= ``low``.

    Example::

        parser.add_argument("--epochs", type=at_least(1))        # "expected an integer >= 1, found 0"
        parser.add_argument("--timeout", type=at_least(0.0, float))
    """
    what = "an integer" if kind is int else "a number"

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, found {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {what} >= {low}, found {value}")
        return value

    return parse
