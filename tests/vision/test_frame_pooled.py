"""FramePooledVideoEncoder: the mean over frames of what each wrapped tower gives, called directly."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from _tiny_towers import TINY_HF_VISION

from vlr_plugins.vision import FramePooledVideoEncoder, VideoTower


def _clip(seed: int = 0, frames: int = 3) -> torch.Tensor:
    return torch.randn(2, frames, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


def _per_frame(embed, frames: torch.Tensor) -> torch.Tensor:
    """(B, T, 3, H, W) -> (B, T, D), the tower called on one frame at a time."""
    return torch.stack([embed(frames[:, t]) for t in range(frames.shape[1])], dim=1)


def _check_mean_pooling(encoder: FramePooledVideoEncoder, embed) -> None:
    frames = _clip()
    with torch.no_grad():
        per_frame = _per_frame(embed, frames)
        encoder.normalize = encoder.normalize_frames = False
        assert torch.allclose(encoder.encode_video(frames), per_frame.mean(dim=1), atol=1e-5)
        encoder.normalize = encoder.normalize_frames = True  # CLIP4Clip's meanP
        expected = F.normalize(F.normalize(per_frame, dim=-1).mean(dim=1), dim=-1)
        assert torch.allclose(encoder.encode_video(frames), expected, atol=1e-5)
        # a one-frame video is the image
        image = encoder.encode_image(frames[:, 0])
        assert torch.allclose(encoder.encode_video(frames[:, :1]), image, atol=1e-6)
        assert torch.allclose(encoder.encode_image(frames[:, 0]), F.normalize(embed(frames[:, 0]), dim=-1),
                              atol=1e-5)


@pytest.mark.parametrize("visual_only", [False, True])
def test_open_clip_model_or_visual(tiny_open_clip_name, visual_only):
    import open_clip

    model = open_clip.create_model(tiny_open_clip_name, pretrained=None).eval()
    encoder = FramePooledVideoEncoder(tower=model.visual if visual_only else model).eval()
    assert encoder.tower.kind == "open_clip" and encoder.embed_dim == 16
    _check_mean_pooling(encoder, model.encode_image)
    assert isinstance(encoder, VideoTower)
    assert (encoder.image_size, encoder.image_mean) == (32, (0.48145466, 0.4578275, 0.40821073))


def test_open_clip_from_a_config_dict(tiny_open_clip_name):
    encoder = FramePooledVideoEncoder(tower=dict(kind="open_clip", model_name=tiny_open_clip_name,
                                                 pretrained=None)).eval()
    _check_mean_pooling(encoder, encoder.tower.encoder)


def test_timm_vit_with_a_linear_projection(tiny_timm_config):
    torch.manual_seed(0)
    encoder = FramePooledVideoEncoder(tower=tiny_timm_config, embed_dim=8).eval()
    vit = encoder.tower.encoder
    assert encoder.tower.kind == "timm" and not encoder.tower.projects and encoder.embed_dim == 8
    _check_mean_pooling(encoder, lambda x: encoder.proj(vit(x)))  # num_classes=0: vit(x) is pooled
    assert encoder.image_size == 32 and encoder.image_mean == (0.5, 0.5, 0.5)


def test_transformers_clip_vision_with_projection():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.CLIPVisionModelWithProjection(
        transformers.CLIPVisionConfig(**TINY_HF_VISION, projection_dim=16)).eval()
    encoder = FramePooledVideoEncoder(tower=model).eval()
    assert encoder.tower.projects and encoder.embed_dim == 16
    _check_mean_pooling(encoder, lambda x: model(pixel_values=x).image_embeds)


def test_transformers_blip_vision_with_blips_projection():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    vision = transformers.BlipVisionModel(transformers.BlipVisionConfig(**TINY_HF_VISION)).eval()
    vision_proj = torch.nn.Linear(32, 16)
    encoder = FramePooledVideoEncoder(tower=vision, projection=vision_proj).eval()
    # BLIP's retrieval feature: vision_proj of the [CLS] row of last_hidden_state
    _check_mean_pooling(encoder, lambda x: vision_proj(vision(pixel_values=x).last_hidden_state[:, 0]))


def test_transformers_blip_retrieval_model_keeps_only_its_vision_half():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BlipConfig(
        vision_config=TINY_HF_VISION,
        text_config=dict(vocab_size=30, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64), image_text_hidden_size=16)
    model = transformers.BlipForImageTextRetrieval(config).eval()
    encoder = FramePooledVideoEncoder(tower=model).eval()
    assert not any(name.startswith("tower.encoder.text") for name, _ in encoder.named_parameters())
    _check_mean_pooling(
        encoder, lambda x: model.vision_proj(model.vision_model(pixel_values=x).last_hidden_state[:, 0]))


def test_transformers_tower_from_a_config_dict():
    pytest.importorskip("transformers")
    tower = dict(kind="transformers", model_class="CLIPVisionModelWithProjection",
                 config=dict(TINY_HF_VISION, projection_dim=16))
    encoder = FramePooledVideoEncoder(tower=tower)
    assert encoder.encode_video(_clip()).shape == (2, 16)
    assert encoder.to_config()["tower"]["model_class"] == "CLIPVisionModelWithProjection"


def test_padding_frames_are_left_out_of_the_mean(tiny_timm_config):
    encoder = FramePooledVideoEncoder(tower=tiny_timm_config).eval()
    frames = _clip()
    mask = torch.tensor([[True, True, False], [True, True, True]])
    with torch.no_grad():
        got = encoder.encode_video(frames, frame_mask=mask)
        assert torch.allclose(got[0], encoder.encode_video(frames[:1, :2])[0], atol=1e-6)
        assert torch.allclose(got[1], encoder.encode_video(frames[1:])[0], atol=1e-6)
    with pytest.raises(ValueError, match="leaves a video without frames"):
        encoder.encode_video(frames, frame_mask=torch.zeros(2, 3, dtype=torch.bool))


def test_frames_go_through_in_passes_of_bounded_size(tiny_timm_config):
    seen = []
    encoder = FramePooledVideoEncoder(tower=tiny_timm_config, frames_per_pass=4).eval()
    encoder.tower.register_forward_pre_hook(lambda _m, args: seen.append(args[0].shape[0]))
    whole = FramePooledVideoEncoder(tower=encoder.tower).eval()
    with torch.no_grad():
        assert torch.allclose(encoder.encode_video(_clip()), whole.encode_video(_clip()), atol=1e-6)
    assert seen[:2] == [4, 2]


def test_config_rebuilds_the_encoder(tiny_timm_config):
    from vlr_plugins.registry import MODELS

    encoder = FramePooledVideoEncoder(tower=tiny_timm_config, embed_dim=8, normalize_frames=False).eval()
    rebuilt = MODELS.build(encoder.to_config()).eval()
    rebuilt.load_state_dict(encoder.state_dict())
    assert torch.equal(rebuilt.encode_video(_clip()), encoder.encode_video(_clip()))


def test_projection_rules(tiny_open_clip_name, tiny_timm_config):
    with pytest.raises(ValueError, match="already projects"):
        FramePooledVideoEncoder(tower=dict(kind="open_clip", model_name=tiny_open_clip_name),
                                projection=torch.nn.Linear(16, 4))
    with pytest.raises(ValueError, match="projects to 16 dims, not embed_dim=4"):
        FramePooledVideoEncoder(tower=dict(kind="open_clip", model_name=tiny_open_clip_name), embed_dim=4)
    assert isinstance(FramePooledVideoEncoder(tower=tiny_timm_config).proj, torch.nn.Identity)
