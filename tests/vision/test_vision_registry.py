"""The towers are named in the core registry and in MMEngine's vlr_plugins scope; importing the
vision package costs only torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from _tiny_towers import TINY_VIT


def test_core_registry_lists_both_towers():
    from vlr_plugins.registry import MODELS
    from vlr_plugins.vision import FramePooledVideoEncoder, SpaceTimeViT

    assert MODELS.get("FramePooledVideoEncoder") is FramePooledVideoEncoder
    assert MODELS.get("SpaceTimeViT") is SpaceTimeViT


def test_mmengine_configs_build_the_towers_in_the_vlr_plugins_scope(tiny_timm_config):
    pytest.importorskip("mmengine")
    from mmengine.registry import MODELS as ROOT

    from vlr_plugins.integrations.mmengine.registry import MODELS
    from vlr_plugins.vision import FramePooledVideoEncoder, SpaceTimeViT

    encoder = MODELS.build(dict(type="FramePooledVideoEncoder", tower=tiny_timm_config, embed_dim=8))
    assert isinstance(encoder, FramePooledVideoEncoder) and encoder.embed_dim == 8
    vit = ROOT.build(dict(type="vlr_plugins.SpaceTimeViT", **TINY_VIT, token_drop_ratio=0.1))
    assert isinstance(vit, SpaceTimeViT) and vit.token_drop_ratio == 0.1


def test_importing_the_vision_package_needs_only_torch():
    code = ("import sys, vlr_plugins.vision;"
            "bad = sorted({m.split('.')[0] for m in sys.modules} & "
            "{'timm', 'transformers', 'open_clip', 'mmengine', 'safetensors', 'torchvision'});"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
