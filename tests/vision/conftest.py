"""Fixtures: tiny random image towers of each family (configs in tests/_support/_tiny_towers.py)."""

from __future__ import annotations

import json

import pytest

from _tiny_towers import TINY_OPEN_CLIP


@pytest.fixture(scope="session")
def tiny_open_clip_name(tmp_path_factory) -> str:
    """The name of a tiny open_clip CLIP (32 px, 16-d space), registered with open_clip."""
    open_clip = pytest.importorskip("open_clip")
    path = tmp_path_factory.mktemp("vision_model_configs") / "vlr-vision-tiny.json"
    path.write_text(json.dumps(TINY_OPEN_CLIP))
    open_clip.add_model_config(path)
    return "vlr-vision-tiny"


@pytest.fixture(scope="session")
def tiny_timm_config() -> dict:
    """A config dict for a 2-layer, 32-wide random timm ViT on 32x32 images."""
    pytest.importorskip("timm")
    return dict(kind="timm", model_name="vit_tiny_patch16_224", img_size=32, depth=2, embed_dim=32,
                num_heads=2)
