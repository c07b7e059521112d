"""load_video_encoder: open_clip models, tower config files and imported towers, as --encoder names them."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from vlr_plugins.errors import VideoEncoderError
from vlr_plugins.specs import load_video_encoder

pytest.importorskip("timm")

FRAMES = 4
TIMM_TOWER = dict(kind="timm", model_name="vit_tiny_patch16_224", img_size=32, depth=1, embed_dim=32, num_heads=2)
TOWER_YAML = ("type: FramePooledVideoEncoder\n"
              "tower: {kind: timm, model_name: vit_tiny_patch16_224, img_size: 32, depth: 1, embed_dim: 32, "
              "num_heads: 2}\n")
PLAIN_TOWER = """
import torch

class Tower:
    image_mean, image_std, image_size = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25), 16

    def encode_video(self, frames):
        return frames.mean(dim=(1, 3, 4))
"""


@pytest.fixture
def tower():
    from vlr_plugins.vision import FramePooledVideoEncoder

    torch.manual_seed(0)
    return FramePooledVideoEncoder(tower=dict(TIMM_TOWER)).eval()


@pytest.fixture
def plain_tower_module(tmp_path, monkeypatch):
    """``plain_tower_<n>:Tower`` importable from ``tmp_path`` (a fresh name per test: modules are cached)."""
    name = f"plain_tower_{abs(hash(str(tmp_path))) % 10**8}"
    (tmp_path / f"{name}.py").write_text(PLAIN_TOWER)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    yield f"{name}:Tower"
    sys.modules.pop(name, None)


def test_open_clip_tower_from_a_local_checkpoint(tmp_path):
    open_clip = pytest.importorskip("open_clip")
    from safetensors.torch import save_file

    from vlr_plugins.vision import FramePooledVideoEncoder

    config = {"embed_dim": 16,
              "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
              "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1}}
    (tmp_path / "vlr-precompute-tiny.json").write_text(json.dumps(config))
    open_clip.add_model_config(tmp_path / "vlr-precompute-tiny.json")
    model = open_clip.create_model("vlr-precompute-tiny").eval()
    save_file(model.state_dict(), str(tmp_path / "tiny.safetensors"))

    tower = load_video_encoder(f"open_clip:vlr-precompute-tiny:{tmp_path / 'tiny.safetensors'}")
    clip = torch.randn(2, 3, 3, 32, 32)
    with torch.no_grad():
        expected = FramePooledVideoEncoder(tower=model).encode_video(clip)
        torch.testing.assert_close(tower.encode_video(clip), expected)
    assert tower.image_size == 32 and not tower.training


def test_tower_config_with_a_checkpoint_gives_the_saved_tower(tmp_path, tower):
    from safetensors.torch import save_file

    save_file(tower.state_dict(), str(tmp_path / "tower.safetensors"))
    (tmp_path / "tower.yaml").write_text(TOWER_YAML + "checkpoint: tower.safetensors\n")
    loaded = load_video_encoder(str(tmp_path / "tower.yaml"))
    clip = torch.randn(1, FRAMES, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(loaded.encode_video(clip), tower.encode_video(clip), rtol=0, atol=0)


def test_a_tower_config_without_checkpoint_builds_the_same_tower_every_time(tmp_path):
    (tmp_path / "tower.yaml").write_text(TOWER_YAML)
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    first = load_video_encoder(str(tmp_path / "tower.yaml"))
    assert torch.equal(before, torch.random.get_rng_state())  # the caller's random state is left alone
    torch.manual_seed(456)
    second = load_video_encoder(str(tmp_path / "tower.yaml"))
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), second.state_dict().values()))


def test_module_callable_towers_and_what_is_not_one(tmp_path, plain_tower_module, monkeypatch):
    module = plain_tower_module.split(":")[0]
    monkeypatch.chdir(tmp_path)
    assert type(load_video_encoder(plain_tower_module)).__name__ == "Tower"  # a class, instantiated
    (tmp_path / f"{module}_more.py").write_text(
        f"from {module} import Tower\nINSTANCE = Tower()\ndef make():\n    return Tower()\n"
        "def images(images):\n    return images\n")
    assert type(load_video_encoder(f"{module}_more:INSTANCE")).__name__ == "Tower"
    assert type(load_video_encoder(f"{module}_more:make")).__name__ == "Tower"
    with pytest.raises(VideoEncoderError, match=r"--encoder .*images': .*needs some"):
        load_video_encoder(f"{module}_more:images", setting="--encoder")
    sys.modules.pop(f"{module}_more", None)


def test_space_time_tower_config_with_a_native_checkpoint(tmp_path):
    from safetensors.torch import save_file

    from vlr_plugins.vision import SpaceTimeViT

    arch = dict(num_frames=4, image_size=32, patch_size=16, tubelet_size=2, width=32, depth=1, num_heads=2,
                embed_dim=8)
    torch.manual_seed(1)
    saved = SpaceTimeViT(**arch).eval()
    save_file(saved.state_dict(), str(tmp_path / "vit.safetensors"))
    (tmp_path / "vit.json").write_text(json.dumps({"type": "SpaceTimeViT", **arch, "checkpoint": "vit.safetensors"}))
    loaded = load_video_encoder(str(tmp_path / "vit.json"))
    clip = torch.randn(2, 4, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(loaded.encode_video(clip), saved.encode_video(clip), rtol=0, atol=0)


def test_a_model_dtype_is_for_mllm_specs_only():
    with pytest.raises(VideoEncoderError, match="'open_clip:ViT-B-32': a model dtype .float16. is chosen for mllm: "
                                                "specs only"):
        load_video_encoder("open_clip:ViT-B-32", setting="--encoder", dtype="float16")
