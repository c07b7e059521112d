"""transformers' VideoMAE checkpoints (VideoMAEModel, VideoMAEForVideoClassification) load into
SpaceTimeViT and the tower computes what transformers computes, fc_norm and its eps included."""

from __future__ import annotations

import json

import pytest
import torch

from _tiny_towers import TINY_VIT

from vlr_plugins.registry import MODELS
from vlr_plugins.vision import VIDEOMAE_FC_NORM_EPS, SpaceTimeViT, load_video_checkpoint, videomae_to_space_time

pytest.importorskip("timm")

EPS = 1e-6


def _clip(frames: int = 4, seed: int = 0) -> torch.Tensor:
    return torch.randn(2, frames, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


def _videomae(mean_pooling: bool, cls=None, eps: float = EPS):
    transformers = pytest.importorskip("transformers")
    config = transformers.VideoMAEConfig(image_size=32, patch_size=16, num_frames=4, tubelet_size=2,
                                         hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=64, layer_norm_eps=eps,
                                         use_mean_pooling=mean_pooling, num_labels=3)
    torch.manual_seed(0)
    model = (cls or transformers.VideoMAEModel)(config).eval()
    with torch.no_grad():
        for param in model.parameters():  # away from the 0/1 initialisation, so every weight matters
            param.add_(0.1 * torch.randn_like(param))
    return model


@pytest.mark.parametrize("mean_pooling", [False, True])
def test_videomae_model_runs_the_same_in_the_tower(mean_pooling):
    ref = _videomae(mean_pooling)
    vit = SpaceTimeViT(**TINY_VIT, final_norm=not mean_pooling, normalize=False).eval()
    loaded = load_video_checkpoint(vit, ref.state_dict())
    assert (loaded.layout, loaded.dropped, loaded.missing, loaded.unexpected) == ("videomae", [], [], [])
    frames = _clip()
    with torch.no_grad():
        expected = ref(pixel_values=frames).last_hidden_state
        out = vit(frames)
    torch.testing.assert_close(out.tokens, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(out.embedding, expected.mean(dim=1), rtol=0, atol=1e-6)


# the converted VideoMAE configs' layer_norm_eps; transformers' fc_norm keeps torch's 1e-5
CLASSIFIER_VIT = dict(TINY_VIT, final_norm=False, pool_norm=True, layer_norm_eps=1e-12, normalize=False)


def _videomae_classifier():
    transformers = pytest.importorskip("transformers")
    return _videomae(True, transformers.VideoMAEForVideoClassification, eps=1e-12)


def _fc_norm_output(ref, frames):
    """What transformers' own fc_norm gives (caught by a hook), and the logits."""
    seen = {}
    handle = ref.fc_norm.register_forward_hook(lambda module, args, out: seen.update(out=out))
    with torch.no_grad():
        logits = ref(pixel_values=frames).logits
    handle.remove()
    return seen["out"], logits


def _pooled(vit, frames):
    with torch.no_grad():
        return vit(frames).pooled


def test_videomae_classifier_checkpoint_keeps_fc_norm_and_its_eps():
    ref = _videomae_classifier()
    assert ref.fc_norm.eps == 1e-5 and ref.videomae.encoder.layer[0].layernorm_before.eps == 1e-12
    vit = SpaceTimeViT(**CLASSIFIER_VIT).eval()
    loaded = load_video_checkpoint(vit, ref.state_dict(), layout="videomae")
    assert loaded.dropped == ["classifier.bias", "classifier.weight"]
    assert vit.pool_norm.eps == VIDEOMAE_FC_NORM_EPS == 1e-5 and vit.to_config()["pool_norm_eps"] == 1e-5
    assert {m.eps for name, m in vit.named_modules() if isinstance(m, torch.nn.LayerNorm)
            and name != "pool_norm"} == {1e-12}
    frames = _clip()
    expected, logits = _fc_norm_output(ref, frames)
    pooled = _pooled(vit, frames)
    torch.testing.assert_close(pooled, expected, rtol=0, atol=1e-6)
    with torch.no_grad():
        torch.testing.assert_close(ref.classifier(pooled), logits, rtol=0, atol=1e-6)
    # the encoder's eps in that norm (what the tower used before) is off by more than the tolerance
    before = SpaceTimeViT(**CLASSIFIER_VIT, pool_norm_eps=1e-12).eval()
    load_video_checkpoint(before, ref.state_dict())
    assert before.pool_norm.eps == 1e-12
    assert (_pooled(before, frames) - expected).abs().max() > 1e-6


def test_videomae_classifier_folder_and_file_load_with_its_fc_norm_eps(tmp_path):
    ref = _videomae_classifier()
    ref.save_pretrained(tmp_path / "classifier")
    torch.save(ref.state_dict(), tmp_path / "classifier.pth")
    frames = _clip(seed=3)
    expected, _ = _fc_norm_output(ref, frames)
    from_folder = SpaceTimeViT(**CLASSIFIER_VIT, pretrained=str(tmp_path / "classifier")).eval()
    from_file = SpaceTimeViT(**CLASSIFIER_VIT).eval()
    assert load_video_checkpoint(from_file, tmp_path / "classifier.pth").layout == "videomae"
    for vit in (from_folder, from_file):
        assert vit.pool_norm.eps == 1e-5
        torch.testing.assert_close(_pooled(vit, frames), expected, rtol=0, atol=1e-6)


def test_the_recorded_config_rebuilds_the_fc_norm_eps_and_old_configs_keep_theirs():
    ref = _videomae_classifier()
    vit = SpaceTimeViT(**CLASSIFIER_VIT).eval()
    load_video_checkpoint(vit, ref.state_dict())
    config = json.loads(json.dumps(vit.to_config()))  # as checkpoints and tower files record it
    rebuilt = MODELS.build(config).eval()
    rebuilt.load_state_dict(vit.state_dict())
    frames = _clip(seed=4)
    assert rebuilt.pool_norm.eps == 1e-5
    torch.testing.assert_close(_pooled(rebuilt, frames), _pooled(vit, frames), rtol=0, atol=0)
    # a config written before pool_norm_eps existed: every norm uses layer_norm_eps, as it did
    old = MODELS.build({k: v for k, v in config.items() if k != "pool_norm_eps"})
    assert old.pool_norm.eps == 1e-12 and old.to_config()["pool_norm_eps"] is None


def test_an_explicit_pool_norm_eps_is_kept_and_a_bad_one_refused(caplog):
    ref = _videomae_classifier()
    vit = SpaceTimeViT(**CLASSIFIER_VIT, pool_norm_eps=1e-6)
    with caplog.at_level("WARNING", logger="vlr_plugins.vision.video_checkpoints"):
        load_video_checkpoint(vit, ref.state_dict())
    assert vit.pool_norm.eps == 1e-6 and "fc_norm uses eps 1e-05" in caplog.text
    # a VideoMAEModel checkpoint has no fc_norm: a fresh pool_norm keeps the encoder's eps
    fresh = SpaceTimeViT(**CLASSIFIER_VIT)
    load_video_checkpoint(fresh, _videomae(True, eps=1e-12).state_dict(), strict=False)
    assert fresh.pool_norm.eps == 1e-12 and fresh.config["pool_norm_eps"] is None
    for bad in (0, -1e-5, "small", True):
        with pytest.raises(ValueError, match=r"pool_norm_eps \(null: layer_norm_eps\) must be a positive number"):
            SpaceTimeViT(**CLASSIFIER_VIT, pool_norm_eps=bad)
    # YAML 1.1 reads 1e-5 (no dot) as a string: it is the number it spells
    spelt = SpaceTimeViT(**dict(CLASSIFIER_VIT, layer_norm_eps="1e-12"), pool_norm_eps="1e-5")
    assert (spelt.pool_norm.eps, spelt.blocks[0].norm1.eps, spelt.config["layer_norm_eps"]) == (1e-5, 1e-12, 1e-12)


def test_videomae_older_q_bias_v_bias_names_map_too():
    ref = _videomae(False)
    old = {k.replace("attention.attention.query.bias", "attention.attention.q_bias")
            .replace("attention.attention.value.bias", "attention.attention.v_bias"): v
           for k, v in ref.state_dict().items()}
    assert any("q_bias" in k for k in old)
    assert videomae_to_space_time(old).keys() == videomae_to_space_time(ref.state_dict()).keys()
    for key, value in videomae_to_space_time(old).items():
        assert torch.equal(value, videomae_to_space_time(ref.state_dict())[key])


def test_fused_qkv_has_a_zero_key_bias():
    sd = videomae_to_space_time(_videomae(False).state_dict())
    bias = sd["blocks.0.attn.qkv.bias"]
    assert bias.shape == (96,) and torch.equal(bias[32:64], torch.zeros(32))


def test_a_saved_transformers_model_folder_loads(tmp_path):
    ref = _videomae(False)
    ref.save_pretrained(tmp_path / "videomae")
    vit = SpaceTimeViT(**TINY_VIT, pretrained=str(tmp_path / "videomae"))
    assert torch.equal(vit.norm.weight, ref.layernorm.weight)
