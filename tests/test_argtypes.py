"""The argparse value types every ``vlr`` subcommand shares."""

from __future__ import annotations

import argparse

import pytest

from vlr_plugins._argtypes import at_least


@pytest.mark.parametrize("low, kind, text, value", [(1, int, "3", 3), (0, int, "0", 0), (0.5, float, "0.5", 0.5)])
def test_values_at_or_above_the_floor_pass(low, kind, text, value):
    parsed = at_least(low, kind)(text)
    assert parsed == value and type(parsed) is kind


@pytest.mark.parametrize("low, kind, text, message", [
    (1, int, "0", "expected an integer >= 1, found 0"),
    (1, int, "1.5", "expected an integer, found '1.5'"),
    (0.0, float, "-1", "expected a number >= 0.0, found -1.0"),
    (0.0, float, "warm", "expected a number, found 'warm'"),
])
def test_a_bad_value_names_what_was_expected(low, kind, text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{message}$".replace("(", r"\(").replace(".", r"\.")):
        at_least(low, kind)(text)
