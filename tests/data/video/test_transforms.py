"""Frame transforms: CLIP's evaluation preprocessing per frame, one crop and flip per clip,
the tower's own normalisation."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

from vlr_plugins.data.video import (
    CLIP_MEAN,
    CLIP_STD,
    IMAGENET_MEAN,
    IMAGENET_STD,
    normalization_of,
    video_transform,
)

pytest.importorskip("torchvision")


def smooth_video(num_frames=4, height=90, width=120, low=30, high=150, seed=0):
    """(T, H, W, 3) uint8: a smooth random image (no edge for bicubic to overshoot), frame t
    brighter than frame 0 by 20 t levels."""
    g = torch.Generator().manual_seed(seed)
    base = torch.nn.functional.interpolate(torch.rand(1, 3, 6, 8, generator=g), size=(height, width),
                                           mode="bilinear", align_corners=False)[0]
    base = low + (high - low) * base
    frames = torch.stack([base + 20 * t for t in range(num_frames)])
    return frames.round().to(torch.uint8).permute(0, 2, 3, 1).contiguous()


def level(levels, std):
    """A pixel difference of `levels` (out of 255) after normalising by the smallest std."""
    return levels / 255 / min(std)


@pytest.mark.parametrize("resize_mode,eval_resize", [("shortest", "center_crop"), ("squash", "squash")])
def test_eval_transform_is_open_clips_preprocessing_on_every_frame(resize_mode, eval_resize):
    open_clip = pytest.importorskip("open_clip")
    from PIL import Image

    frames = smooth_video(num_frames=3)
    ours = video_transform(False, 32, CLIP_MEAN, CLIP_STD, eval_resize=eval_resize)(frames)
    preprocess = open_clip.image_transform(32, is_train=False, mean=CLIP_MEAN, std=CLIP_STD, resize_mode=resize_mode)
    reference = torch.stack([preprocess(Image.fromarray(f.numpy())) for f in frames])
    assert ours.shape == (3, 3, 32, 32) and ours.dtype == torch.float32
    # PIL resizes in its own fixed-point arithmetic, torchvision in float: 1-level differences
    assert (ours - reference).abs().max() <= level(2, CLIP_STD)


@pytest.mark.parametrize("train", [True, False])
def test_the_given_mean_and_std_normalise_pixels_scaled_to_unit(train):
    colour = torch.tensor([200, 100, 50], dtype=torch.uint8)
    frames = colour.expand(2, 40, 60, 3).contiguous()
    out = video_transform(train, 24, IMAGENET_MEAN, IMAGENET_STD)(frames)
    expected = (colour.float() / 255 - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD)
    assert out.shape == (2, 3, 24, 24)
    assert torch.allclose(out, expected.view(1, 3, 1, 1).expand_as(out), atol=1e-5)


def test_training_crops_and_flips_every_frame_of_a_clip_alike():
    frames = smooth_video(num_frames=5)
    transform = video_transform(True, 32, CLIP_MEAN, CLIP_STD)
    std = torch.tensor(CLIP_STD).view(3, 1, 1)
    for seed in range(8):
        torch.manual_seed(seed)
        out = transform(frames)
        # the same crop of a uniformly brighter frame is uniformly brighter: 20 t levels
        for t in range(1, 5):
            assert ((out[t] - out[0]) * std * 255 - 20 * t).abs().max() <= 1.5, (seed, t)


def test_training_flips_whole_clips_half_of_the_time():
    frames = torch.zeros(3, 64, 64, 3, dtype=torch.uint8)
    frames[:, :, 32:] = 255  # right half white
    transform = video_transform(True, 16, CLIP_MEAN, CLIP_STD, scale=(1.0, 1.0))
    flipped = []
    for seed in range(40):
        torch.manual_seed(seed)
        out = transform(frames)
        left_brighter = out[:, :, :, :8].mean(dim=(1, 2, 3)) > out[:, :, :, 8:].mean(dim=(1, 2, 3))
        assert left_brighter.all() or not left_brighter.any()  # all frames alike
        flipped.append(bool(left_brighter[0]))
    assert 8 <= sum(flipped) <= 32


def test_crops_are_random_in_training_and_fixed_in_evaluation():
    frames = smooth_video(num_frames=2)
    train, evaluate = (video_transform(t, 32, CLIP_MEAN, CLIP_STD) for t in (True, False))
    torch.manual_seed(0)
    a, b = train(frames), train(frames)
    assert not torch.equal(a, b)
    assert torch.equal(evaluate(frames), evaluate(frames))


def test_transforms_pickle_into_workers():
    frames = smooth_video(num_frames=2)
    transform = video_transform(False, 32, IMAGENET_MEAN, IMAGENET_STD)
    copy = pickle.loads(pickle.dumps(transform))
    assert torch.equal(copy(frames), transform(frames))
    assert "eval, center_crop" in repr(copy) and "size=32" in repr(copy)


def test_bad_inputs_say_what_was_expected():
    transform = video_transform(False, 32, CLIP_MEAN, CLIP_STD)
    with pytest.raises(ValueError, match=r"expected frames of shape \(T, H, W, 3\) and dtype uint8, found \(2, 3, 8, 8\)"):
        transform(torch.zeros(2, 3, 8, 8, dtype=torch.uint8))
    with pytest.raises(ValueError, match="dtype uint8, found .* torch.float32"):
        transform(torch.zeros(2, 8, 8, 3))
    with pytest.raises(ValueError, match="mean must hold 3 values"):
        video_transform(True, 32, (0.5,), CLIP_STD)
    with pytest.raises(ValueError, match="std must be positive"):
        video_transform(True, 32, CLIP_MEAN, (0.5, 0.0, 0.5))
    with pytest.raises(ValueError, match="eval_resize must be one of"):
        video_transform(False, 32, CLIP_MEAN, CLIP_STD, eval_resize="pad")


# ---------------------------------------------------------------- the tower's normalisation


def test_normalization_of_an_open_clip_model_and_its_visual_tower(tmp_path):
    open_clip = pytest.importorskip("open_clip")
    config = {"embed_dim": 16,
              "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
              "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1}}
    (tmp_path / "vlr-video-tiny.json").write_text(json.dumps(config))
    open_clip.add_model_config(tmp_path / "vlr-video-tiny.json")

    default = open_clip.create_model("vlr-video-tiny")
    assert normalization_of(default) == (CLIP_MEAN, CLIP_STD)  # open_clip's OpenAI default
    siglip_like = open_clip.create_model("vlr-video-tiny", force_preprocess_cfg={"mean": (0.5,) * 3, "std": (0.5,) * 3})
    assert normalization_of(siglip_like) == normalization_of(siglip_like.visual) == ((0.5,) * 3, (0.5,) * 3)


def test_normalization_of_transformers_image_processors():
    transformers = pytest.importorskip("transformers")
    assert normalization_of(transformers.CLIPImageProcessor()) == (CLIP_MEAN, CLIP_STD)
    assert normalization_of(transformers.SiglipImageProcessor()) == ((0.5,) * 3, (0.5,) * 3)


def test_normalization_of_timm_models():
    timm = pytest.importorskip("timm")
    assert normalization_of(timm.create_model("resnet10t", pretrained=False)) == (IMAGENET_MEAN, IMAGENET_STD)
    assert normalization_of(timm.create_model("vit_tiny_patch16_224", pretrained=False)) == ((0.5,) * 3, (0.5,) * 3)


def test_normalization_of_a_mapping_and_of_something_else():
    assert normalization_of({"mean": [0.1, 0.2, 0.3], "std": [1, 2, 3]}) == ((0.1, 0.2, 0.3), (1.0, 2.0, 3.0))
    assert normalization_of({"image_mean": CLIP_MEAN, "image_std": CLIP_STD}) == (CLIP_MEAN, CLIP_STD)
    with pytest.raises(ValueError, match="cannot find the normalisation of a Linear: expected an open_clip model"):
        normalization_of(torch.nn.Linear(2, 2))
