"""Tiny random exports of three kinds (open_clip, BLIP paragraph text tower, EOL embedder) for the MTEB tests."""

from __future__ import annotations

import pytest

pytest.importorskip("mteb")


@pytest.fixture(scope="session")
def open_clip_export(tmp_path_factory):
    pytest.importorskip("open_clip")
    import _mteb_exports

    return _mteb_exports.open_clip_export(tmp_path_factory.mktemp("mteb-open-clip"))


@pytest.fixture(scope="session")
def blip_export(tmp_path_factory):
    pytest.importorskip("transformers")
    import _mteb_exports

    return _mteb_exports.blip_export(tmp_path_factory.mktemp("mteb-blip"))


@pytest.fixture(scope="session")
def blip_two_tower_export(tmp_path_factory):
    pytest.importorskip("transformers")
    import _mteb_exports

    return _mteb_exports.blip_export(tmp_path_factory.mktemp("mteb-blip-both"), image_side=True)


@pytest.fixture(scope="session")
def mvc_export(tmp_path_factory):
    pytest.importorskip("timm")
    pytest.importorskip("torchvision")
    import _mteb_exports

    return _mteb_exports.mvc_export(tmp_path_factory.mktemp("mteb-mvc"))


@pytest.fixture(scope="session")
def eol_base(tmp_path_factory):
    pytest.importorskip("torchvision")  # Qwen2-VL's video processor
    from _tiny_mllm import save_tiny_qwen2vl

    return save_tiny_qwen2vl(tmp_path_factory.mktemp("mteb-eol-base") / "tiny-qwen2vl", seed=3)


@pytest.fixture(scope="session")
def eol_embedder(eol_base):
    from vlr_plugins.mllm import EOLEmbedder

    return EOLEmbedder(eol_base, prompt="care", num_frames=4, frame_strategy="uniform")


@pytest.fixture(scope="session")
def eol_export(eol_embedder, tmp_path_factory):
    """An EOL (CaRe-prompt) export of a random tiny Qwen2-VL that samples 4 frames per clip."""
    from vlr_plugins.hf.export_eol import export_eol_embedder

    return export_eol_embedder(eol_embedder, tmp_path_factory.mktemp("mteb-eol") / "care-export",
                               recipe="care/stage2_paper")
