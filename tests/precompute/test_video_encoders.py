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


def test_open_clip_local_dir_tower_with_a_trained_checkpoint(tmp_path):
    """``open_clip:local-dir:FOLDER:CHECKPOINT``: the folder's config, the checkpoint's weights
    (an open_clip_train checkpoint: ``state_dict``, keys ``module.``-prefixed under DDP)."""
    open_clip = pytest.importorskip("open_clip")
    from vlr_plugins.integrations.open_clip.tiny import write_local_dir_model
    from vlr_plugins.vision import FramePooledVideoEncoder

    folder = write_local_dir_model(tmp_path / "clip:tiny")  # a colon in the folder's name
    torch.manual_seed(3)
    trained = open_clip.create_model(f"local-dir:{folder}", load_weights=False).eval()
    torch.save({"epoch": 1, "state_dict": {f"module.{k}": v for k, v in trained.state_dict().items()}},
               tmp_path / "epoch_1.pt")

    tower = load_video_encoder(f"open_clip:local-dir:{folder}:{tmp_path / 'epoch_1.pt'}")
    own = load_video_encoder(f"open_clip:local-dir:{folder}")  # the folder's own weights
    clip = torch.randn(2, 3, 3, 32, 32)
    with torch.no_grad():
        expected = FramePooledVideoEncoder(tower=trained).encode_video(clip)
        torch.testing.assert_close(tower.encode_video(clip), expected)
        assert not torch.allclose(own.encode_video(clip), expected)


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


def _videomae_classifier():
    """A tiny random transformers VideoMAEForVideoClassification, with its own fc_norm output hooked."""
    transformers = pytest.importorskip("transformers")
    config = transformers.VideoMAEConfig(image_size=32, patch_size=16, num_frames=4, tubelet_size=2, hidden_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                         use_mean_pooling=True, num_labels=3)  # layer_norm_eps: 1e-12
    torch.manual_seed(0)
    model = transformers.VideoMAEForVideoClassification(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.1 * torch.randn_like(param))
    return model


def _fc_norm_of(model, clip):
    seen = {}
    handle = model.fc_norm.register_forward_hook(lambda module, args, out: seen.update(out=out))
    with torch.no_grad():
        model(pixel_values=clip)
    handle.remove()
    return seen["out"]


VIDEOMAE_TOWER = dict(type="SpaceTimeViT", num_frames=4, image_size=32, patch_size=16, tubelet_size=2, width=32,
                      depth=1, num_heads=2, mlp_ratio=2.0, final_norm=False, pool_norm=True, normalize=False)


def test_a_videomae_classifier_through_a_tower_file_and_a_trained_checkpoint_keeps_its_fc_norm_eps(tmp_path):
    ref = _videomae_classifier()
    ref.save_pretrained(tmp_path / "classifier")
    clip = torch.randn(2, 4, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    expected = _fc_norm_of(ref, clip)
    # YAML as users write it: PyYAML reads 1e-12 (no dot) as a string, which the tower takes as the number
    text = "".join(f"{k}: {v}\n" for k, v in VIDEOMAE_TOWER.items())
    (tmp_path / "tower.yaml").write_text(text + "layer_norm_eps: 1e-12\ncheckpoint: classifier\n"
                                                "checkpoint_layout: videomae\n")
    tower = load_video_encoder(str(tmp_path / "tower.yaml")).eval()
    assert tower.pool_norm.eps == 1e-5 and tower.blocks[0].norm1.eps == 1e-12
    with torch.no_grad():
        torch.testing.assert_close(tower.encode_video(clip), expected, rtol=0, atol=1e-6)
    # a tower file that gives the encoder's eps keeps it, and is off by more than that tolerance
    (tmp_path / "eps.json").write_text(json.dumps({**VIDEOMAE_TOWER, "layer_norm_eps": 1e-12, "pool_norm_eps": 1e-12,
                                                   "checkpoint": "classifier"}))
    with torch.no_grad():
        assert (load_video_encoder(str(tmp_path / "eps.json")).eval().encode_video(clip) - expected).abs().max() > 1e-6
    # a vlr train checkpoint records the tower's config (meta['vlr_video_encoder']) and its weights
    weights = {f"video_encoder.{k}": v for k, v in tower.state_dict().items()}
    meta = json.loads(json.dumps(tower.to_config()))
    torch.save({"meta": {"vlr_video_encoder": meta}, "state_dict": weights}, tmp_path / "trained.pth")
    trained = load_video_encoder(f"vlr:{tmp_path / 'trained.pth'}").eval()
    with torch.no_grad():
        torch.testing.assert_close(trained.encode_video(clip), expected, rtol=0, atol=1e-6)
    # one recorded before pool_norm_eps existed rebuilds as it did: every norm at layer_norm_eps
    old = {k: v for k, v in meta.items() if k != "pool_norm_eps"}
    torch.save({"meta": {"vlr_video_encoder": old}, "state_dict": weights}, tmp_path / "old.pth")
    assert load_video_encoder(f"vlr:{tmp_path / 'old.pth'}").pool_norm.eps == 1e-12
