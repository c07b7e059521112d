"""A tiny open_clip architecture (registered with add_model_config) and a tiny image-text set."""

from __future__ import annotations

import json
import logging

import pytest
from _tiny_open_clip import TINY_CLIP

pytest.importorskip("open_clip_train")

TINY_CONFIG = TINY_CLIP

COLOURS = ["red", "green", "blue", "yellow", "white", "black", "purple", "orange"]


@pytest.fixture(scope="session")
def tiny_config() -> dict:
    """A copy of :data:`TINY_CONFIG` (open_clip's ``model_cfg``)."""
    return json.loads(json.dumps(TINY_CONFIG))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    """The name of a ~1.6M-parameter CLIP (77 text positions), registered with open_clip."""
    import open_clip

    path = tmp_path_factory.mktemp("model_configs") / "vlr-tiny.json"
    path.write_text(json.dumps(TINY_CONFIG))
    open_clip.add_model_config(path)
    return "vlr-tiny"


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> dict[str, str]:
    """8 PNG images with captions, generated captions, hard negatives and paragraphs, as
    JSON Lines (``train.jsonl``) and as open_clip's TSV (``train.csv``)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("tiny_data")
    (root / "images").mkdir()
    records, rows = [], ["filepath\ttitle"]
    for i, colour in enumerate(COLOURS):
        image = f"images/{i}.png"
        Image.new("RGB", (40, 40), colour).save(root / image)
        records.append(
            {
                "id": f"img{i}",
                "image": image,
                "caption": f"a {colour} square",
                "positives": [f"a square that is {colour}", f"{colour} colour everywhere"],
                "hard_negatives": [f"a {COLOURS[i - 1]} square", f"a {colour} circle"],
                "paragraph": f"A {colour} square fills the picture. Nothing else is visible. "
                f"The {colour} is flat and even.",
            }
        )
        rows.append(f"{image}\ta {colour} square")
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (root / "train.csv").write_text("\n".join(rows) + "\n")
    return {"root": str(root), "jsonl": str(root / "train.jsonl"), "csv": str(root / "train.csv")}


@pytest.fixture
def restore_logging():
    """open_clip_train's setup_logging adds root handlers and sets every logger's level."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in list(logging.root.manager.loggerDict)}
    yield
    for h in root.handlers[len(handlers) :]:
        h.close()
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, lvl in levels.items():
        logging.getLogger(name).setLevel(lvl)
