"""Tiny random image towers of each family, and a tiny space-time ViT configuration."""

from __future__ import annotations

import json

import pytest

TINY_OPEN_CLIP = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}

# 4 frames of 32x32, 16-px patches, 2-frame tubelets: 2 x 2 x 2 = 8 tokens
TINY_VIT = dict(num_frames=4, image_size=32, patch_size=16, tubelet_size=2, width=32, depth=2,
                num_heads=2, mlp_ratio=2.0)

TINY_HF_VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      image_size=32, patch_size=16)


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
