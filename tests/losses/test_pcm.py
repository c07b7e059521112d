"""Primary-component matching (Long-CLIP) against an independent transcription, its PCA,
the batch-too-small warning (Long-CLIP issue #68), gradients and two gloo processes."""

from __future__ import annotations

import doctest
import importlib
import json
import warnings

import pytest
import torch
import torch.nn.functional as F
from _gloo import run_on_ranks

from vlr_plugins.losses import (
    PrimaryComponentMatchingLoss,
    multi_positive_infonce,
    pcm,
    primary_component_matching,
    principal_component_reconstruction,
)
from vlr_plugins.registry import LOSSES

WORLD_SIZE = 2


def reference_pca(x: torch.Tensor, k: int) -> torch.Tensor:
    """Top-k principal components from the eigenvectors of the scatter matrix."""
    mean = x.mean(0, keepdim=True)
    centred = x - mean
    _, vectors = torch.linalg.eigh(centred.T @ centred)  # ascending eigenvalues
    top = vectors[:, -k:] if k < x.shape[1] else vectors
    return centred @ top @ top.T + mean


def reference_clip(a: torch.Tensor, b: torch.Tensor, t: float) -> torch.Tensor:
    """Symmetric InfoNCE on rows used as given (no normalisation here)."""
    logits = a @ b.T / t
    i2t = -torch.log_softmax(logits, dim=1).diagonal().mean()
    t2i = -torch.log_softmax(logits, dim=0).diagonal().mean()
    return (i2t + t2i) / 2


def reference_loss(image, long_text, short_text, k=32, t=0.01, w=1.0) -> torch.Tensor:
    """Long-CLIP's forward on one process, without label smoothing: normalise, PCA the
    normalised image rows, score the reconstruction without re-normalising it."""
    x = image / image.norm(dim=1, keepdim=True)
    long_text = long_text / long_text.norm(dim=1, keepdim=True)
    short_text = short_text / short_text.norm(dim=1, keepdim=True)
    return reference_clip(x, long_text, t) + w * reference_clip(reference_pca(x, k), short_text, t)


def _triple(rows: int, dim: int, seed: int = 0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(rows, dim, generator=g, dtype=dtype) for _ in range(3))


@pytest.fixture
def fresh_warning(monkeypatch):
    """Each test sees the once-per-process warning as not yet given."""
    monkeypatch.setattr(pcm, "_warned_no_op", False)


@pytest.mark.parametrize("rows, dim, k, t, w", [
    (12, 8, 3, 0.07, 1.0),
    (10, 16, 1, 0.01, 0.5),
    (9, 4, 2, 0.2, 2.0),   # D < B - 1
])
def test_matches_reference(rows, dim, k, t, w):
    image, long_text, short_text = _triple(rows, dim, seed=rows)
    loss = primary_component_matching(image, long_text, short_text, num_components=k,
                                      temperature=t, short_weight=w)
    expected = reference_loss(image, long_text, short_text, k, t, w)
    torch.testing.assert_close(loss, expected, rtol=1e-10, atol=1e-12)


def test_label_smoothing_smooths_the_four_cross_entropies():
    """Long-CLIP's model_longclip.py: every cross-entropy with label_smoothing=0.1."""
    image, long_text, short_text = _triple(12, 8, seed=4)
    eps, t, k = 0.1, 0.05, 3

    def smoothed_clip(a, b):
        logits = a @ b.T / t
        target = torch.arange(a.shape[0])
        return (F.cross_entropy(logits, target, label_smoothing=eps)
                + F.cross_entropy(logits.T, target, label_smoothing=eps)) / 2

    x, long_n, short_n = (F.normalize(r, dim=-1) for r in (image, long_text, short_text))
    expected = smoothed_clip(x, long_n) + smoothed_clip(reference_pca(x, k), short_n)
    loss = primary_component_matching(image, long_text, short_text, num_components=k,
                                      temperature=t, label_smoothing=eps)
    torch.testing.assert_close(loss, expected, rtol=1e-10, atol=1e-12)
    module = PrimaryComponentMatchingLoss(num_components=k, temperature=t,
                                          learnable_temperature=False, label_smoothing=eps)
    torch.testing.assert_close(module(image, long_text, short_text), expected)
    assert module.get_config_dict()["label_smoothing"] == eps


def test_defaults_are_long_clips():
    image, long_text, short_text = _triple(40, 48, seed=1)
    loss = primary_component_matching(image, long_text, short_text)
    torch.testing.assert_close(loss, reference_loss(image, long_text, short_text, 32, 0.01, 1.0))
    config = PrimaryComponentMatchingLoss().get_config_dict()
    assert config["num_components"] == 32 and config["short_weight"] == 1.0
    assert config["temperature"] == pytest.approx(0.01) and config["learnable_temperature"]


def test_reconstruction_is_not_renormalised():
    image, long_text, short_text = _triple(12, 8, seed=2)
    x = F.normalize(image, dim=1)
    reduced = principal_component_reconstruction(x, 2)
    assert not torch.allclose(reduced.norm(dim=1), torch.ones(12, dtype=torch.float64))
    fine = reference_clip(x, F.normalize(long_text, dim=1), 0.1)
    cosine = reference_clip(F.normalize(reduced, dim=1), F.normalize(short_text, dim=1), 0.1)
    loss = primary_component_matching(image, long_text, short_text, num_components=2,
                                      temperature=0.1)
    assert (loss - fine - cosine).abs() > 1e-3


def test_short_weight_zero_is_infonce_on_long_captions():
    image, long_text, short_text = _triple(10, 8, seed=3)
    loss = primary_component_matching(image, long_text, short_text, num_components=2,
                                      temperature=0.05, short_weight=0.0)
    torch.testing.assert_close(
        loss, multi_positive_infonce(image, long_text, torch.arange(10), temperature=0.05))


# -- the PCA ---------------------------------------------------------------------------

@pytest.mark.parametrize("rows, dim, k", [(12, 8, 3), (20, 6, 1), (9, 16, 5)])
def test_reconstruction_properties(rows, dim, k):
    x = _triple(rows, dim, seed=4)[0]
    reduced = principal_component_reconstruction(x, k)
    torch.testing.assert_close(reduced, reference_pca(x, k))
    # rank k around the preserved mean
    mean = x.mean(0, keepdim=True)
    torch.testing.assert_close(reduced.mean(0, keepdim=True), mean)
    assert int(torch.linalg.matrix_rank(reduced - mean)) == k
    # a projection: reducing again changes nothing; what is dropped is orthogonal to it
    torch.testing.assert_close(principal_component_reconstruction(reduced, k), reduced)
    torch.testing.assert_close((reduced - mean).T @ (x - reduced),
                               torch.zeros(dim, dim, dtype=x.dtype), atol=1e-10, rtol=0)


@pytest.mark.parametrize("rows, dim, k", [(5, 8, 4), (5, 8, 7), (20, 4, 4), (1, 4, 1)])
def test_reconstruction_is_exact_when_k_covers_the_batch(rows, dim, k):
    x = _triple(rows, dim, seed=5)[0]
    assert principal_component_reconstruction(x, k) is x
    if rows > 1:
        torch.testing.assert_close(reference_pca(x, min(k, dim)), x)


def test_reconstruction_is_computed_in_float32_for_half_inputs():
    x = _triple(12, 8, seed=6, dtype=torch.float32)[0]
    reduced = principal_component_reconstruction(x.bfloat16(), 3)
    assert reduced.dtype == torch.bfloat16
    torch.testing.assert_close(reduced.float(), reference_pca(x.bfloat16().float(), 3),
                               atol=2e-2, rtol=2e-2)


# -- the no-op warning (Long-CLIP issue #68) --------------------------------------------

@pytest.mark.parametrize("rows, k", [(33, 32), (8, 32), (4, 3)])
def test_small_batch_warns_once_and_coarse_term_is_infonce(fresh_warning, rows, k):
    image, long_text, short_text = _triple(rows, 64, seed=7)
    with pytest.warns(UserWarning, match=r"issue #68.*Warned once per process"):
        loss = primary_component_matching(image, long_text, short_text, num_components=k,
                                          temperature=0.05, short_weight=0.5)
    owner = torch.arange(rows)
    fine = multi_positive_infonce(image, long_text, owner, temperature=0.05)
    coarse = multi_positive_infonce(image, short_text, owner, temperature=0.05)
    torch.testing.assert_close(loss, fine + 0.5 * coarse)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        primary_component_matching(image, long_text, short_text, num_components=k)


def test_components_covering_the_dimension_warn(fresh_warning):
    with pytest.warns(UserWarning, match=r"min\(B - 1, D\) = 4"):
        primary_component_matching(*_triple(50, 4, seed=8), num_components=4)


def test_large_enough_batch_does_not_warn(fresh_warning):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        primary_component_matching(*_triple(34, 64, seed=9), num_components=32)
        primary_component_matching(*_triple(6, 64, seed=9), num_components=4)


# -- gradients --------------------------------------------------------------------------

@pytest.mark.parametrize("rows, dim, k", [(6, 5, 2), (8, 3, 2), (4, 5, 3)])
def test_gradcheck_through_the_pca(rows, dim, k, fresh_warning):
    # nothing is detached (as in Long-CLIP); (4, 5, 3) is the exact, SVD-free case
    image, long_text, short_text = _triple(rows, dim, seed=10)
    temperature = torch.tensor(0.3, dtype=torch.float64)
    inputs = tuple(x.requires_grad_() for x in (image, long_text, short_text, temperature))

    def loss(i, lt, st, t):
        return primary_component_matching(i, lt, st, num_components=k, temperature=t,
                                          short_weight=0.7)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.autograd.gradcheck(loss, inputs)


def test_gradient_reaches_images_through_the_reconstruction():
    image, long_text, short_text = _triple(10, 8, seed=11)
    image.requires_grad_()
    primary_component_matching(image, long_text, short_text, num_components=2,
                               short_weight=1.0).backward()
    with_pca = image.grad.clone()
    image.grad = None
    x = F.normalize(image, dim=1)
    detached = reference_clip(x, F.normalize(long_text, dim=1), 0.01) + reference_clip(
        reference_pca(x.detach(), 2), F.normalize(short_text, dim=1), 0.01)
    detached.backward()
    assert not torch.allclose(with_pca, image.grad)


# -- the module -------------------------------------------------------------------------

def test_module_is_the_functional():
    image, long_text, short_text = _triple(12, 8, seed=12)
    loss_fn = PrimaryComponentMatchingLoss(num_components=3, short_weight=0.5, temperature=0.05,
                                           learnable_temperature=False)
    expected = primary_component_matching(image, long_text, short_text, num_components=3,
                                          temperature=0.05, short_weight=0.5)
    torch.testing.assert_close(loss_fn(image, long_text, short_text), expected)


def test_module_takes_its_temperature_at_call_time():
    image, long_text, short_text = _triple(12, 8, seed=14)
    loss_fn = PrimaryComponentMatchingLoss(num_components=3)  # learnable, starts at 0.01
    ours = loss_fn(image.requires_grad_(), long_text, short_text, temperature=0.2)
    torch.testing.assert_close(ours, reference_loss(image, long_text, short_text, k=3, t=0.2))
    ours.backward()
    assert loss_fn.temperature.grad is None, "the module's own temperature is not used"

    log_scale = torch.tensor(3.0, dtype=torch.float64, requires_grad=True)
    loss_fn(image, long_text, short_text, temperature=1 / log_scale.exp()).backward()
    h = 1e-6
    up, down = (reference_loss(image.detach(), long_text, short_text, k=3,
                               t=float(torch.exp(torch.tensor(-(3.0 + d), dtype=torch.float64))))
                for d in (h, -h))
    torch.testing.assert_close(log_scale.grad, (up - down) / (2 * h), rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match=r"PrimaryComponentMatchingLoss.forward: temperature must "
                                         r"be > 0; found 0"):
        loss_fn(image, long_text, short_text, temperature=0)


def test_module_learns_its_temperature():
    loss_fn = PrimaryComponentMatchingLoss(num_components=2)
    assert [name for name, _ in loss_fn.named_parameters()] == ["temperature"]
    image, long_text, short_text = _triple(10, 8, seed=13, dtype=torch.float32)
    loss_fn(image, long_text, short_text).backward()
    grad = loss_fn.temperature.grad
    assert grad is not None and torch.isfinite(grad) and grad != 0


def test_config_dict_rebuilds_the_loss():
    loss_fn = PrimaryComponentMatchingLoss(num_components=8, short_weight=0.1, temperature=0.02,
                                           gather=False)
    config = loss_fn.get_config_dict()
    json.dumps(config)
    assert PrimaryComponentMatchingLoss(**config).get_config_dict() == config
    assert "num_components=8" in repr(loss_fn)


def test_registered_by_name():
    loss_fn = LOSSES.build({"type": "PrimaryComponentMatchingLoss", "num_components": 4})
    assert isinstance(loss_fn, PrimaryComponentMatchingLoss) and loss_fn.num_components == 4


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_components": 0}, r"num_components must be an integer >= 1; found 0"),
        ({"num_components": 2.0}, r"num_components must be an integer >= 1; found 2.0"),
        ({"short_weight": -1.0}, r"short_weight must be >= 0; found -1.0"),
        ({"temperature": 0.0}, r"temperature must be > 0; found 0.0"),
        ({"temperature": torch.ones(2)}, r"temperature must be a scalar"),
        ({"label_smoothing": 2}, r"label_smoothing must be a number in \[0, 1\]; found 2"),
    ],
)
def test_argument_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        primary_component_matching(*_triple(10, 8), **kwargs)


@pytest.mark.parametrize(
    "shapes, message",
    [
        (((10, 8), (9, 8), (10, 8)), (r"long_text_emb must hold one caption per image, in "
                                      r"image order: expected shape \(10, 8\) \(that of "
                                      r"image_emb\), found \(9, 8\)")),
        (((10, 8), (10, 8), (10, 6)), r"short_text_emb must hold one caption per image"),
        (((10, 8, 1), (10, 8, 1), (10, 8, 1)), r"image_emb must be 2-D"),
    ],
)
def test_shape_errors(shapes, message):
    with pytest.raises(ValueError, match=message):
        primary_component_matching(*(torch.randn(*s) for s in shapes))


def test_module_constructor_errors():
    with pytest.raises(ValueError, match=r"PrimaryComponentMatchingLoss: num_components"):
        PrimaryComponentMatchingLoss(num_components=-3)
    with pytest.raises(ValueError, match=r"PrimaryComponentMatchingLoss: short_weight"):
        PrimaryComponentMatchingLoss(short_weight=-0.5)


def test_docstring_examples_run():
    result = doctest.testmod(importlib.import_module("vlr_plugins.losses.pcm"))
    assert result.attempted > 0 and result.failed == 0


# -- two gloo processes -----------------------------------------------------------------

def _make_ranks() -> list[tuple[torch.Tensor, ...]]:
    """Different numbers of images per rank; the global batch of 7 exceeds 2 + 1 rows."""
    return [_triple(3, 6, seed=20), _triple(4, 6, seed=21)]


def _loss_and_grads(local: tuple[torch.Tensor, ...], gather: bool | None) -> dict[str, torch.Tensor]:
    leaves = [x.clone().requires_grad_() for x in local]
    temperature = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)
    loss = primary_component_matching(*leaves, num_components=2, temperature=temperature,
                                      short_weight=0.5, gather=gather)
    loss.backward()
    return {"loss": loss.detach(), "temperature": temperature.grad,
            **{name: x.grad for name, x in zip(("image", "long", "short"), leaves)}}


def _rank_results(rank: int) -> dict:
    local = _make_ranks()[rank]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the global batch is large enough
        results = {"auto": _loss_and_grads(local, None), "on": _loss_and_grads(local, True)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # each local batch alone is not
        results["local_only"] = _loss_and_grads(local, False)
    return results


@pytest.mark.timeout(120)
def test_two_processes_match_the_concatenated_batch(tmp_path):
    results = run_on_ranks(_rank_results, WORLD_SIZE, tmp_path)
    ranks = _make_ranks()
    full = tuple(torch.cat(parts) for parts in zip(*ranks))
    single = _loss_and_grads(full, False)
    bounds = [0, 3, 7]
    for r, result in enumerate(results):
        for mode in ("auto", "on"):
            got = result[mode]
            torch.testing.assert_close(got["loss"], single["loss"])
            # every rank computes the global loss, and all_gather's backward sums the
            # WORLD_SIZE copies (see test_gather.py); the temperature is not gathered
            for name in ("image", "long", "short"):
                torch.testing.assert_close(got[name],
                                           WORLD_SIZE * single[name][bounds[r]:bounds[r + 1]])
            torch.testing.assert_close(got["temperature"], single["temperature"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            alone = _loss_and_grads(ranks[r], False)
        torch.testing.assert_close(result["local_only"]["loss"], alone["loss"])
