"""argparse value types and option checks shared by every ``vlr`` subcommand (a bad value is
an argparse error naming the option, status 2)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from vlr_plugins.errors import UsageError

__all__ = ["at_least", "check_device", "non_negative_int", "positive_int"]


def at_least(low: float, kind: type = int, *, named: str | None = None) -> Callable[[str], int | float]:
    """An argparse ``type``: a ``kind`` (int or float) value >= ``low``.

    ``named`` says what is expected in both messages (``"a positive integer"``) instead of
    ``"an integer"`` / ``"an integer >= low"``.

    Example::

        parser.add_argument("--epochs", type=at_least(1))        # "expected an integer >= 1, found 0"
        parser.add_argument("--timeout", type=at_least(0.0, float))
    """
    what = "an integer" if kind is int else "a number"
    unparsed, low_value = (named, named) if named else (what, f"{what} >= {low}")

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {unparsed}, found {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {low_value}, found {value}")
        return value

    return parse


#: a count (``--batch-size``): an integer >= 1
positive_int = at_least(1, named="a positive integer")
#: a count that may be 0 (``--workers``)
non_negative_int = at_least(0, named="an integer >= 0")


def check_device(text: str) -> str:
    """``--device`` as given, once it names a device this machine has; checked before any work."""
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise UsageError("--device", f"expected cpu, cuda, cuda:N or mps, found {text!r}") from None
    backend = getattr(torch, device.type, None) if device.type != "cpu" else None
    if backend is not None and hasattr(backend, "is_available") and not backend.is_available():
        built = "" if device.type != "cuda" or torch.version.cuda else f" (this torch {torch.__version__} has no CUDA)"
        raise UsageError("--device", f"{text!r}: no {device.type} device is available on this machine{built}; "
                                     "use --device cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UsageError("--device", f"{text!r}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                                     f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    return text
