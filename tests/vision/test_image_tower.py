"""Image towers recognised by their attributes, with the normalisation each family declares."""

from __future__ import annotations

import pytest
import torch

from _tiny_towers import TINY_HF_VISION

from vlr_plugins.vision import CLIP_MEAN, CLIP_STD, ImageTower, build_image_tower, wrap_image_tower


def test_timm_reads_pretrained_cfg_and_the_patch_grid(tiny_timm_config):
    tower = wrap_image_tower(build_image_tower(tiny_timm_config))
    assert (tower.kind, tower.dim, tower.projects) == ("timm", 32, False)
    assert (tower.image_size, tower.image_mean, tower.image_std) == (32, (0.5,) * 3, (0.5,) * 3)


def test_open_clip_reads_preprocess_cfg(tiny_open_clip_name):
    model = build_image_tower(dict(kind="open_clip", model_name=tiny_open_clip_name))
    tower = wrap_image_tower(model)
    assert (tower.kind, tower.dim, tower.projects, tower.image_size) == ("open_clip", 16, True, 32)
    assert tower.encoder is model.visual  # the text tower is not kept
    assert (tower.image_mean, tower.image_std) == (CLIP_MEAN, CLIP_STD)


def test_transformers_clip_vision_model_gives_its_pooler_output():
    transformers = pytest.importorskip("transformers")
    model = transformers.CLIPVisionModel(transformers.CLIPVisionConfig(**TINY_HF_VISION)).eval()
    tower = wrap_image_tower(model)
    assert (tower.kind, tower.dim, tower.projects, tower.image_size) == ("transformers", 32, False, 32)
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(tower(images), model(pixel_values=images).pooler_output)


def test_transformers_types_of_unknown_normalisation_need_it_given():
    transformers = pytest.importorskip("transformers")
    model = transformers.ViTModel(transformers.ViTConfig(**TINY_HF_VISION)).eval()
    with pytest.raises(ValueError, match="give image_mean= and image_std="):
        wrap_image_tower(model)
    tower = wrap_image_tower(model, image_mean=(0.5,) * 3, image_std=(0.5,) * 3)
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(tower(images), model(pixel_values=images).pooler_output)


def test_any_module_with_its_normalisation_given():
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 5))
    tower = wrap_image_tower(net, image_mean=(0.1, 0.2, 0.3), image_std=(1, 1, 1), image_size=8)
    assert isinstance(tower, ImageTower) and tower.kind == "module" and tower.image_size == 8
    assert tower(torch.randn(4, 3, 8, 8)).shape == (4, 5)
    with pytest.raises(TypeError, match="cannot tell what kind of image tower a Sequential is"):
        wrap_image_tower(net)


def test_explicit_normalisation_overrides_the_towers(tiny_timm_config):
    tower = wrap_image_tower(build_image_tower(tiny_timm_config), image_mean=CLIP_MEAN, image_size=(32, 32))
    assert tower.image_mean == CLIP_MEAN and tower.image_std == (0.5,) * 3 and tower.image_size == 32
    with pytest.raises(ValueError, match="one value per RGB channel"):
        wrap_image_tower(tower, image_std=(1.0, 1.0))


def test_bad_tower_configs_are_refused():
    with pytest.raises(ValueError, match="needs kind= one of"):
        build_image_tower(dict(model_name="ViT-B-32"))
    pytest.importorskip("transformers")
    with pytest.raises(ValueError, match="has no class 'NoSuchModel'"):
        build_image_tower(dict(kind="transformers", model_class="NoSuchModel", config={}))
    with pytest.raises(ValueError, match="exactly one of pretrained= or config=, got neither"):
        build_image_tower(dict(kind="transformers", model_class="CLIPVisionModel"))
