"""The InfoNCE modules: what they accept, their temperature, config and registration."""

from __future__ import annotations

import doctest
import importlib
import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from vlr_plugins.losses import (
    HardNegativeInfoNCELoss,
    InfoNCELoss,
    MultiPositiveInfoNCELoss,
    multi_positive_infonce,
)
from vlr_plugins.registry import LOSSES

LOSS_CLASSES = [InfoNCELoss, MultiPositiveInfoNCELoss, HardNegativeInfoNCELoss]


def _emb(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_infonce_equals_open_clip_clip_loss():
    open_clip_loss = pytest.importorskip("open_clip.loss")
    image, text = _emb(6, 12, seed=1), _emb(6, 12, seed=2)
    ours = InfoNCELoss(temperature=0.05)(image, text)
    clip = open_clip_loss.ClipLoss()(F.normalize(image, dim=-1), F.normalize(text, dim=-1),
                                     logit_scale=1 / 0.05)
    torch.testing.assert_close(ours, clip)


def test_infonce_owner_permutes_captions():
    image, text = _emb(4, 8, seed=3), _emb(4, 8, seed=4)
    owner = torch.tensor([2, 0, 3, 1])  # caption j describes image owner[j]
    in_image_order = text[torch.argsort(owner)]
    loss_fn = InfoNCELoss()
    torch.testing.assert_close(loss_fn(image, text, owner), loss_fn(image, in_image_order))


def test_infonce_needs_exactly_one_caption_per_image():
    loss_fn = InfoNCELoss()
    with pytest.raises(ValueError, match=r"exactly one caption per image: expected 3 captions, "
                                         r"found 4 \(use MultiPositiveInfoNCELoss\)"):
        loss_fn(_emb(3, 8), _emb(4, 8), torch.tensor([0, 0, 1, 2]))
    with pytest.raises(ValueError, match=r"images \[1\] have none"):
        loss_fn(_emb(3, 8), _emb(3, 8), torch.tensor([0, 0, 2]))


@pytest.mark.parametrize("cls", [InfoNCELoss, MultiPositiveInfoNCELoss])
def test_losses_without_negatives_reject_them(cls):
    with pytest.raises(ValueError, match=rf"{cls.__name__} takes no hard negatives"):
        cls()(_emb(2, 8), _emb(2, 8), neg_emb=_emb(3, 8))


@pytest.mark.parametrize("variant", ["mean_log", "log_sum"])
def test_multi_positive_module_is_the_functional(variant):
    image, text = _emb(3, 8, seed=5), _emb(5, 8, seed=6)
    owner = torch.tensor([0, 1, 1, 2, 2])
    ours = MultiPositiveInfoNCELoss(variant=variant, temperature=0.1)(image, text, owner)
    expected = multi_positive_infonce(image, text, owner, temperature=0.1, variant=variant)
    torch.testing.assert_close(ours, expected)


@pytest.mark.parametrize("cls", LOSS_CLASSES)
def test_modules_pass_label_smoothing_to_the_functional(cls):
    image, text, neg = _emb(3, 8, seed=11), _emb(3, 8, seed=12), _emb(2, 8, seed=13)
    owner = torch.arange(3)
    negatives = {"neg_emb": neg} if cls is HardNegativeInfoNCELoss else {}
    ours = cls(temperature=0.1, label_smoothing=0.1)(image, text, owner, **negatives)
    expected = multi_positive_infonce(image, text, owner, temperature=0.1, label_smoothing=0.1,
                                      **negatives)
    torch.testing.assert_close(ours, expected)
    assert ours != cls(temperature=0.1)(image, text, owner, **negatives)


@pytest.mark.parametrize("kwargs, message", [
    ({"label_smoothing": 1.1}, r"label_smoothing must be a number in \[0, 1\]; found 1.1"),
    ({"cache_chunk": 0}, r"cache_chunk must be an integer >= 1 .* found 0"),
    ({"cache_chunk": 8.0}, r"cache_chunk must be an integer >= 1 .* found 8.0"),
])
def test_constructor_checks_smoothing_and_chunk(kwargs, message):
    with pytest.raises(ValueError, match=rf"MultiPositiveInfoNCELoss: {message}"):
        MultiPositiveInfoNCELoss(**kwargs)


def test_text_owner_none_needs_one_caption_per_image():
    with pytest.raises(ValueError, match=r"text_owner=None means caption i belongs to image i.*"
                                         r"found 2 images and 3 captions"):
        MultiPositiveInfoNCELoss()(_emb(2, 8), _emb(3, 8))


@pytest.mark.parametrize("scope", ["batch", "own"])
def test_hard_negative_module_is_the_functional(scope):
    image, text, neg = _emb(3, 8, seed=7), _emb(4, 8, seed=8), _emb(5, 8, seed=9)
    owner, neg_owner = torch.tensor([0, 1, 2, 2]), torch.tensor([0, 0, 1, 2, 2])
    loss_fn = HardNegativeInfoNCELoss(hard_negative_scope=scope, variant="log_sum")
    expected = multi_positive_infonce(image, text, owner, neg_emb=neg, neg_owner=neg_owner,
                                      variant="log_sum", hard_negative_scope=scope)
    torch.testing.assert_close(loss_fn(image, text, owner, neg, neg_owner), expected)


def test_hard_negative_module_requires_negatives():
    with pytest.raises(ValueError, match=r"needs hard negatives: expected neg_emb \(M, D\)"):
        HardNegativeInfoNCELoss()(_emb(2, 8), _emb(2, 8))


@pytest.mark.parametrize("cls", LOSS_CLASSES)
def test_learnable_temperature_is_clamped_and_learns(cls):
    loss_fn = cls(temperature=0.07, learnable_temperature=True, temperature_range=(0.01, 0.5))
    assert [name for name, _ in loss_fn.named_parameters()] == ["temperature"]
    extra = {"neg_emb": _emb(2, 8, seed=3)} if cls is HardNegativeInfoNCELoss else {}
    image, text = _emb(3, 8, seed=1), _emb(3, 8, seed=2)
    for value, clamped in [(5.0, 0.5), (1e-4, 0.01)]:
        with torch.no_grad():
            loss_fn.temperature.fill_(value)  # e.g. an optimizer step overshooting
        loss = loss_fn(image, text, **extra)
        assert loss_fn.temperature.item() == pytest.approx(clamped)
        loss_fn.temperature.grad = None
        loss.backward()
        grad = loss_fn.temperature.grad
        assert grad is not None and torch.isfinite(grad) and grad != 0
        # the gradient is the one of the loss at the clamped temperature
        expected_fn = cls(temperature=clamped, learnable_temperature=True,
                          temperature_range=(0.01, 0.5))
        expected_fn(image, text, **extra).backward()
        torch.testing.assert_close(grad, expected_fn.temperature.grad)


def _inputs(cls) -> tuple[tuple[torch.Tensor, ...], dict, dict]:
    """(args, kwargs of the module, kwargs of multi_positive_infonce) for one batch."""
    image, text = _emb(3, 8, seed=21).requires_grad_(), _emb(3, 8, seed=22)
    if cls is InfoNCELoss:
        return (image, text), {}, {}
    owner = torch.tensor([0, 2, 1])
    if cls is MultiPositiveInfoNCELoss:
        return (image, text, owner), {}, {"variant": "log_sum"}
    neg, neg_owner = _emb(4, 8, seed=23), torch.tensor([0, 0, 1, 2])
    return ((image, text, owner), {"neg_emb": neg, "neg_owner": neg_owner},
            {"variant": "log_sum", "neg_emb": neg, "neg_owner": neg_owner,
             "hard_negative_scope": "own"})


def _module(cls, **kwargs):
    if cls is InfoNCELoss:
        return cls(**kwargs)
    if cls is MultiPositiveInfoNCELoss:
        return cls(variant="log_sum", **kwargs)
    return cls(hard_negative_scope="own", variant="log_sum", **kwargs)


@pytest.mark.parametrize("cls", LOSS_CLASSES)
@pytest.mark.parametrize("learnable", [False, True])
def test_temperature_given_at_call_time_replaces_the_modules_own(cls, learnable):
    args, kwargs, functional_kwargs = _inputs(cls)
    image, text = args[:2]
    owner = args[2] if len(args) > 2 else torch.arange(3)
    loss_fn = _module(cls, temperature=0.07, learnable_temperature=learnable)
    ours = loss_fn(*args, **kwargs, temperature=0.3)
    expected = multi_positive_infonce(image, text, owner, temperature=0.3, **functional_kwargs)
    torch.testing.assert_close(ours, expected)
    own = multi_positive_infonce(image, text, owner, temperature=0.07, **functional_kwargs)
    torch.testing.assert_close(loss_fn(*args, **kwargs), own)
    assert not torch.isclose(ours, own)
    ours.backward()
    if learnable:
        assert loss_fn.temperature.grad is None, "the module's own temperature is not used"


@pytest.mark.parametrize("cls", LOSS_CLASSES)
def test_a_tensor_temperature_gets_its_gradient(cls):
    args, kwargs, _ = _inputs(cls)
    log_scale = torch.tensor(2.5, dtype=torch.float64, requires_grad=True)  # open_clip's
    loss = _module(cls)(*args, **kwargs, temperature=1 / log_scale.exp())
    loss.backward()
    as_float = _module(cls)(*args, **kwargs, temperature=float(torch.exp(-log_scale.detach())))
    torch.testing.assert_close(loss.detach(), as_float)
    # d loss / d log_scale by central differences of the float temperature
    h = 1e-6
    up, down = ((_module(cls)(*args, **kwargs, temperature=float(torch.exp(-(log_scale.detach() + d))))
                 for d in (h, -h)))
    assert log_scale.grad is not None and log_scale.grad != 0
    torch.testing.assert_close(log_scale.grad, (up - down) / (2 * h), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("cls", LOSS_CLASSES)
@pytest.mark.parametrize("bad, message", [
    (0.0, r"temperature must be > 0; found 0.0"),
    (-0.1, r"temperature must be > 0; found -0.1"),
    (torch.ones(2), r"temperature must be a scalar; found shape \(2,\)"),
])
def test_a_bad_call_time_temperature_is_named(cls, bad, message):
    args, kwargs, _ = _inputs(cls)
    with pytest.raises(ValueError, match=rf"{cls.__name__}.forward: {message}"):
        _module(cls)(*args, **kwargs, temperature=bad)


def test_fixed_temperature_is_not_a_parameter():
    loss_fn = InfoNCELoss(temperature=0.02)
    assert list(loss_fn.parameters()) == []
    assert loss_fn.get_config_dict()["temperature"] == 0.02


@pytest.mark.parametrize("cls", LOSS_CLASSES)
def test_config_dict_rebuilds_the_loss(cls):
    loss_fn = cls(temperature=0.05, learnable_temperature=True, temperature_range=(0.01, 0.2),
                  gather=False, label_smoothing=0.1, cache_chunk=16)
    config = loss_fn.get_config_dict()
    json.dumps(config)  # goes into a model card
    assert cls(**config).get_config_dict() == config
    assert config["temperature"] == pytest.approx(0.05)
    assert f"temperature_range={config['temperature_range']!r}" in repr(loss_fn)


def test_config_dict_names_the_variant_and_scope():
    config = HardNegativeInfoNCELoss(hard_negative_scope="own", variant="log_sum").get_config_dict()
    assert config["hard_negative_scope"] == "own" and config["variant"] == "log_sum"


@pytest.mark.parametrize(
    "cls, kwargs, message",
    [
        (InfoNCELoss, dict(temperature=-1.0), r"InfoNCELoss: temperature must be > 0"),
        (InfoNCELoss, dict(temperature_range=(0.5, 0.1)), r"0 < low < high; found \(0.5, 0.1\)"),
        (InfoNCELoss, dict(temperature=0.9, learnable_temperature=True),
         r"expected 0.001 <= temperature <= 0.5, found 0.9"),
        (MultiPositiveInfoNCELoss, dict(variant="sum"), r"variant must be one of"),
        (HardNegativeInfoNCELoss, dict(hard_negative_scope="mine"),
         r"hard_negative_scope must be one of \('batch', 'own'\); found 'mine'"),
    ],
)
def test_constructor_errors(cls, kwargs, message):
    with pytest.raises(ValueError, match=message):
        cls(**kwargs)


def test_registered_by_name():
    assert {c.__name__ for c in LOSS_CLASSES} <= set(LOSSES.names())
    loss_fn = LOSSES.build({"type": "HardNegativeInfoNCELoss", "hard_negative_scope": "own"})
    assert isinstance(loss_fn, HardNegativeInfoNCELoss) and loss_fn.hard_negative_scope == "own"
    assert LOSSES.get("InfoNCELoss") is InfoNCELoss


def test_docstring_examples_run():
    module = importlib.import_module("vlr_plugins.losses.infonce")
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_importing_losses_pulls_in_no_ecosystem_package():
    code = (
        "import sys, vlr_plugins.losses\n"
        "bad = sorted(m for m in sys.modules "
        "if m.split('.')[0] in {'mmengine', 'transformers', 'open_clip', 'lavis', 'timm'})\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
