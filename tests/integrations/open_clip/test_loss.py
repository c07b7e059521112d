"""The core losses in open_clip_train's loss slot: equal to ClipLoss, temperature from the model."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("open_clip_train")
from open_clip.loss import ClipLoss  # noqa: E402

from vlr_plugins.integrations.open_clip import OpenCLIPLoss, build_openclip_loss  # noqa: E402
from vlr_plugins.losses import (  # noqa: E402
    InfoNCELoss,
    MultiPositiveInfoNCELoss,
    multi_positive_infonce,
    primary_component_matching,
)


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
    assert ours.loss.temperature == 0.5, "the loss's own temperature is left as it was"


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


def test_pcm_puts_the_long_and_short_captions_in_their_places():
    g = torch.Generator().manual_seed(3)
    image, long_text, short_text = torch.randn(3, 8, 16, generator=g, dtype=torch.float64)
    scale = torch.tensor(20.0, dtype=torch.float64)
    ours = build_openclip_loss(
        {"type": "PrimaryComponentMatchingLoss", "num_components": 2, "temperature": 0.5}
    )
    value = ours(image, long_text, scale, text_owner=torch.arange(8), short_text_features=short_text)
    expected = primary_component_matching(
        image, long_text, short_text, num_components=2, temperature=1 / scale
    )
    torch.testing.assert_close(value, expected)
    swapped = primary_component_matching(
        image, short_text, long_text, num_components=2, temperature=1 / scale
    )
    assert abs(float(swapped - expected)) > 1e-3, "the test tells long from short captions"
    at_own = primary_component_matching(
        image, long_text, short_text, num_components=2, temperature=0.5
    )
    assert abs(float(at_own - expected)) > 1e-3, "the test tells the two temperatures apart"


def _hard_negative_batch():
    g = torch.Generator().manual_seed(4)
    image = torch.randn(3, 16, generator=g, dtype=torch.float64)
    text = torch.randn(5, 16, generator=g, dtype=torch.float64)
    neg = torch.randn(4, 16, generator=g, dtype=torch.float64)
    return image, text, torch.tensor([0, 1, 2, 2, 0]), neg, torch.tensor([0, 0, 1, 2])


def test_hard_negatives_of_their_own_image_through_the_adapter():
    image, text, owner, neg, neg_owner = _hard_negative_batch()
    scale = torch.tensor(1 / 0.07, dtype=torch.float64)
    ours = build_openclip_loss({"type": "HardNegativeInfoNCELoss", "hard_negative_scope": "own"})
    value = ours(image, text, scale, text_owner=owner, neg_features=neg, neg_owner=neg_owner)
    reference = {
        scope: multi_positive_infonce(
            image, text, owner, temperature=1 / scale, neg_emb=neg, neg_owner=neg_owner,
            hard_negative_scope=scope,
        )
        for scope in ("own", "batch")
    }
    torch.testing.assert_close(value, reference["own"])
    assert abs(float(reference["batch"] - reference["own"])) > 1e-3


def _through_the_adapter(kind, log_scale):
    if kind == "PrimaryComponentMatchingLoss":
        g = torch.Generator().manual_seed(5)
        image, long_text, short_text = torch.randn(3, 8, 16, generator=g, dtype=torch.float64)
        ours = build_openclip_loss({"type": kind, "num_components": 2})
        value = ours(image, long_text, log_scale.exp(), short_text_features=short_text)
        return value, lambda t: primary_component_matching(
            image, long_text, short_text, num_components=2, temperature=t
        )
    image, text, owner, neg, neg_owner = _hard_negative_batch()
    if kind == "HardNegativeInfoNCELoss":
        ours = build_openclip_loss({"type": kind, "hard_negative_scope": "own"})
        value = ours(image, text, log_scale.exp(), text_owner=owner, neg_features=neg,
                     neg_owner=neg_owner)
        return value, lambda t: multi_positive_infonce(
            image, text, owner, temperature=t, neg_emb=neg, neg_owner=neg_owner,
            hard_negative_scope="own",
        )
    ours = build_openclip_loss({"type": kind})
    value = ours(image, text, log_scale.exp(), text_owner=owner)
    return value, lambda t: multi_positive_infonce(image, text, owner, temperature=t)


@pytest.mark.parametrize(
    "kind", ["MultiPositiveInfoNCELoss", "HardNegativeInfoNCELoss", "PrimaryComponentMatchingLoss"]
)
def test_the_gradient_reaches_logit_scale_through_the_adapter(kind):
    at = math.log(1 / 0.05)
    log_scale = torch.tensor(at, dtype=torch.float64, requires_grad=True)
    value, core = _through_the_adapter(kind, log_scale)
    value.backward()
    h = 1e-6
    slope = (core(math.exp(-(at + h))) - core(math.exp(-(at - h)))) / (2 * h)
    assert log_scale.grad is not None and abs(float(log_scale.grad)) > 1e-4
    torch.testing.assert_close(log_scale.grad, slope, rtol=1e-5, atol=1e-8)


class _PairLoss(torch.nn.Module):
    """A user's loss whose forward has no temperature keyword."""

    def forward(self, image_emb, text_emb, text_owner=None):
        return InfoNCELoss(temperature=0.1)(image_emb, text_emb, text_owner)


def test_refuses_what_it_cannot_serve():
    image, text = features()
    with pytest.raises(ValueError, match="never update.*logit_scale is the learnable"):
        OpenCLIPLoss(InfoNCELoss(learnable_temperature=True))
    with pytest.raises(ValueError, match=r"never update.*temperature='model'"):
        OpenCLIPLoss(InfoNCELoss(learnable_temperature=True), temperature="loss")
    with pytest.raises(ValueError, match=r"_PairLoss.forward takes no temperature keyword"):
        OpenCLIPLoss(_PairLoss())
    own = OpenCLIPLoss(_PairLoss(), temperature="loss")(image, text, torch.tensor(100.0))
    torch.testing.assert_close(own, ClipLoss()(image, text, torch.tensor(10.0)))
    with pytest.raises(ValueError, match="logit_bias"):
        build_openclip_loss({"type": "InfoNCELoss"})(
            image, text, torch.tensor(10.0), logit_bias=torch.tensor(0.0)
        )
