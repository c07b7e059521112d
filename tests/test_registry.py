"""The core registry: named, listable, idempotent, refusing silent replacement."""

from __future__ import annotations

import pytest

from vlr_plugins.registry import LOSSES, Registry


def test_register_get_build_and_list():
    reg = Registry("things")

    @reg.register
    class Widget:
        """A widget for tests.

        More text.
        """

        def __init__(self, size=1):
            self.size = size

    assert reg.get("Widget") is Widget
    assert reg.build({"type": "Widget", "size": 3}).size == 3
    assert [(e.name, e.description) for e in reg.entries()] == [("Widget", "A widget for tests.")]
    reg.register(Widget)  # the same object again: a no-op
    assert reg.names("W*") == ["Widget"] and reg.names("X*") == []


def test_replacing_a_different_object_is_refused():
    reg = Registry("things")

    def one():
        return 1

    def two():
        return 2

    reg.register(one, name="f")
    with pytest.raises(KeyError, match="already has 'f'"):
        reg.register(two, name="f")
    assert reg.get("f")() == 1
    reg.register(two, name="f", force=True)
    assert reg.get("f")() == 2


def test_unknown_names_list_what_exists():
    with pytest.raises(KeyError, match="no loss named .NoSuchLoss.; known: .*InfoNCELoss"):
        LOSSES.get("NoSuchLoss")
    with pytest.raises(KeyError, match="a loss config needs a 'type' key"):
        LOSSES.build({"temperature": 0.1})


@pytest.mark.parametrize("kind, entry", [("losses", "loss"), ("models", "model"), ("readers", "reader"),
                                         ("metrics", "metric"), ("things", "thing"), ("data", "data")])
def test_an_unknown_name_is_refused_naming_one_entry_of_the_kind(kind, entry):
    with pytest.raises(KeyError, match=f"^\"no {entry} named 'Nope'; known: none\"$"):
        Registry(kind).get("Nope")

