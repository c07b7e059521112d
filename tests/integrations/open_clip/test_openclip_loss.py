"""The core losses in open_clip_train's loss slot: equal to ClipLoss, temperature from the model."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("open_clip_train")
from open_clip.loss import ClipLoss  # noqa: E402

from vlr_plugins.integrations.open_clip import OpenCLIPLoss, build_openclip_loss  # noqa: E402
from vlr_plugins.losses import InfoNCELoss, MultiPositiveInfoNCELoss  # noqa: E402


def features(b=6, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    image = torch.nn.functional.normalize(torch.randn(b, d, generator=g), dim=-1)
    text = torch.nn.functional.normalize(torch.randn(b, d, generator=g), dim=-1)
    return image, text


@pytest.mark.parametrize("temperature", [0.07, 0.01, 1.0])
def test_infonce_equals_open_clip_clip_loss(temperature):
    image, text = features()
    ours = InfoNCELoss(temperature=temperature)(image, text)
    theirs = ClipLoss()(image, text, logit_scale=torch.tensor(1 / temperature))
    torch.testing.assert_close(ours, theirs)


def test_the_adapter_runs_at_the_models_logit_scale_with_its_gradient():
    image, text = features()
    log_scale = torch.tensor(math.log(1 / 0.07), requires_grad=True)
    ours = build_openclip_loss({"type": "InfoNCELoss", "temperature": 0.5})
    out = ours(image, text, log_scale.exp(), output_dict=True)
    assert set(out) == {"contrastive_loss"}
    torch.testing.assert_close(out["contrastive_loss"], ClipLoss()(image, text, log_scale.exp()))
    out["contrastive_loss"].backward()
    assert log_scale.grad is not None and log_scale.grad != 0
    assert ours.loss.temperature == 0.5, "the loss's own temperature comes back after the call"


def test_the_loss_own_temperature_when_asked():
    image, text = features()
    ours = build_openclip_loss({"type": "InfoNCELoss", "temperature": 0.05}, temperature="loss")
    value = ours(image, text, torch.tensor(100.0))
    torch.testing.assert_close(value, ClipLoss()(image, text, torch.tensor(20.0)))


def test_several_captions_and_hard_negatives_reach_the_core_loss():
    image, text = features(b=3)
    extra = torch.randn(2, 16)
    owner = torch.tensor([0, 1, 2, 0, 2])
    scale = torch.tensor(1 / 0.07)
    ours = build_openclip_loss({"type": "MultiPositiveInfoNCELoss", "variant": "log_sum"})
    value = ours(image, torch.cat([text, extra]), scale, text_owner=owner)
    expected = MultiPositiveInfoNCELoss(variant="log_sum", temperature=0.07)(
        image, torch.cat([text, extra]), owner
    )
    torch.testing.assert_close(value, expected)
    negatives = build_openclip_loss({"type": "HardNegativeInfoNCELoss"})
    with_neg = negatives(
        image,
        text,
        scale,
        text_owner=torch.arange(3),
        neg_features=extra,
        neg_owner=torch.tensor([0, 1]),
    )
    assert with_neg > ours.loss(image, text, torch.arange(3)) - 1e-6


def test_pcm_gets_long_and_short_captions():
    image, text = features(b=5)
    short = torch.randn(5, 16)
    ours = build_openclip_loss({"type": "PrimaryComponentMatchingLoss", "num_components": 2})
    assert ours.wants_short_captions
    value = ours(
        image, text, torch.tensor(100.0), text_owner=torch.arange(5), short_text_features=short
    )
    assert value.ndim == 0 and torch.isfinite(value)
    with pytest.raises(ValueError, match="short caption"):
        ours(image, text, torch.tensor(100.0), text_owner=torch.arange(5))
    with pytest.raises(ValueError, match="one long caption per image"):
        ours(
            image[:2],
            text[:4],
            torch.tensor(100.0),
            text_owner=torch.tensor([0, 0, 1, 1]),
            short_text_features=short[:2],
        )


def test_refuses_what_it_cannot_serve():
    image, text = features()
    with pytest.raises(ValueError, match="never update"):
        OpenCLIPLoss(InfoNCELoss(learnable_temperature=True))
    with pytest.raises(ValueError, match="logit_bias"):
        build_openclip_loss({"type": "InfoNCELoss"})(
            image, text, torch.tensor(10.0), logit_bias=torch.tensor(0.0)
        )
