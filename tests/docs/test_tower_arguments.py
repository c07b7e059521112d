"""docs/vision.md's argument tables name every constructor argument of the video towers, each
with its real default: a new argument or a changed default fails here until the page says it."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from vlr_plugins.vision import FramePooledVideoEncoder, SpaceTimeViT

PAGE = Path(__file__).resolve().parents[2] / "docs" / "vision.md"


def _table(after: str) -> dict[str, str]:
    """{argument: default cell} of the first table after the line ``after``."""
    text = PAGE.read_text(encoding="utf-8")
    rows = {}
    for line in text[text.index(after):].splitlines()[1:]:
        if rows and not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) < 3 or cells[0] in ("argument", "---"):
            continue
        for name in re.findall(r"`(\w+)`", cells[0]):
            rows[name] = cells[1]
    return rows


def _defaults(cls) -> dict[str, object]:
    return {n: p.default for n, p in inspect.signature(cls.__init__).parameters.items() if n != "self"}


@pytest.mark.parametrize("cls, heading", [(SpaceTimeViT, "### Arguments"),
                                          (FramePooledVideoEncoder, "**Arguments**")])
def test_every_argument_is_in_the_table_with_its_default(cls, heading):
    rows, defaults = _table(heading), _defaults(cls)
    assert set(rows) == set(defaults), (set(defaults) - set(rows), set(rows) - set(defaults))
    for name, default in defaults.items():
        cell = rows[name]
        if default is inspect.Parameter.empty:
            assert cell == "—", name
        elif isinstance(default, float):
            numbers = [float(t) for t in re.findall(r"\d+(?:\.\d+)?(?:e-?\d+)?", cell)]
            assert default in numbers, (name, default, cell)
        elif isinstance(default, (bool, int, str)) or default is None:
            assert str(default) in cell.replace("`", "").replace('"', ""), (name, default, cell)
