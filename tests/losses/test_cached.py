"""The Cached* losses: their uncached losses with a chunk size for the trainers, registered
by name, rebuilt from their config; with cached_encode, their gradients are the uncached."""

from __future__ import annotations

import doctest
import importlib
import json

import pytest
import torch
from torch import nn

from vlr_plugins.losses import (
    CachedHardNegativeInfoNCELoss,
    CachedInfoNCELoss,
    CachedMultiPositiveInfoNCELoss,
    CachedPrimaryComponentMatchingLoss,
    HardNegativeInfoNCELoss,
    InfoNCELoss,
    MultiPositiveInfoNCELoss,
    PrimaryComponentMatchingLoss,
    cached_encode,
)
from vlr_plugins.registry import LOSSES

PAIRS = [
    (CachedInfoNCELoss, InfoNCELoss),
    (CachedMultiPositiveInfoNCELoss, MultiPositiveInfoNCELoss),
    (CachedHardNegativeInfoNCELoss, HardNegativeInfoNCELoss),
    (CachedPrimaryComponentMatchingLoss, PrimaryComponentMatchingLoss),
]


def _emb(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _args(cls) -> tuple:
    image, text = _emb(6, 8, seed=1), _emb(6, 8, seed=2)
    if issubclass(cls, PrimaryComponentMatchingLoss):
        return image, text, _emb(6, 8, seed=3)
    if issubclass(cls, HardNegativeInfoNCELoss):
        return image, text, torch.arange(6), _emb(4, 8, seed=4)
    return (image, text)


@pytest.mark.parametrize("cached, plain", PAIRS)
def test_value_is_the_uncached_loss(cached, plain):
    kw = {"num_components": 2} if plain is PrimaryComponentMatchingLoss else {}
    loss = cached(cache_chunk=4, label_smoothing=0.1, **kw)
    assert loss.cache_chunk == 4 and isinstance(loss, plain)
    expected = plain(cache_chunk=None, label_smoothing=0.1, **kw)
    torch.testing.assert_close(loss(*_args(cached)), expected(*_args(cached)))


@pytest.mark.parametrize("cached, plain", PAIRS)
def test_registered_and_rebuilt_from_config(cached, plain):
    loss = LOSSES.build({"type": cached.__name__})
    assert type(loss) is cached and loss.cache_chunk == 32
    config = loss.get_config_dict()
    json.dumps(config)
    assert cached(**config).get_config_dict() == config
    assert plain(**config).cache_chunk == 32  # the same switch on the plain loss


def test_gradients_through_cached_encode_equal_the_uncached():
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 8))
    x, image = _emb(10, 8, seed=5), _emb(5, 8, seed=6)
    owner = torch.arange(10) // 2
    loss_fn = CachedMultiPositiveInfoNCELoss(cache_chunk=3, label_smoothing=0.1)
    grads = []
    for chunk in (loss_fn.cache_chunk, None):
        encoder.zero_grad(set_to_none=True)
        loss_fn(image, cached_encode(encoder, x, chunk_size=chunk, parameters=encoder), owner).backward()
        grads.append([p.grad.clone() for p in encoder.parameters()])
    for got, expected in zip(*grads):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_docstring_examples_run():
    module = importlib.import_module("vlr_plugins.losses.cached")
    assert doctest.testmod(module).failed == 0
