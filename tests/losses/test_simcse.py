"""Supervised SimCSE / CaRe eq. 4: against the equation in plain torch, the image-text core,
two gloo processes, and its refusals."""

from __future__ import annotations

import doctest
import importlib
import math

import pytest
import torch
import torch.nn.functional as F
from _gloo import run_on_ranks

from vlr_plugins.losses import SupervisedSimCSELoss, multi_positive_infonce, supervised_simcse
from vlr_plugins.registry import LOSSES

WORLD_SIZE = 2


def _emb(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def eq4(f, fp, fn, tau):
    """CaReBench eq. 4 written out term by term."""
    cos = lambda a, b: float(torch.dot(a, b) / (a.norm() * b.norm()))  # noqa: E731
    n = f.shape[0]
    total = 0.0
    for i in range(n):
        num = math.exp(cos(f[i], fp[i]) / tau)
        den = sum(math.exp(cos(f[i], fp[j]) / tau) + (math.exp(cos(f[i], fn[j]) / tau) if fn is not None else 0.0)
                  for j in range(n))
        total += -math.log(num / den)
    return total / n


@pytest.mark.parametrize("with_negatives", [True, False])
def test_equals_eq4_written_out(with_negatives):
    f, fp, fn = _emb(5, 8, seed=1), _emb(5, 8, seed=2), _emb(5, 8, seed=3)
    fn = fn if with_negatives else None
    got = supervised_simcse(f, fp, fn, temperature=0.05)
    assert got.item() == pytest.approx(eq4(f, fp, fn, 0.05), rel=1e-6)


def test_is_the_image_to_text_half_of_the_symmetric_core():
    f, fp, fn = _emb(4, 8, seed=4), _emb(4, 8, seed=5), _emb(4, 8, seed=6)
    owner = torch.arange(4)
    symmetric = multi_positive_infonce(f, fp, owner, temperature=0.05, neg_emb=fn, hard_negative_scope="batch")
    # the core's text-to-image term: each positive against the anchors
    t2i = F.cross_entropy(F.normalize(fp, dim=-1) @ F.normalize(f, dim=-1).T / 0.05, owner)
    torch.testing.assert_close(supervised_simcse(f, fp, fn, temperature=0.05).double(), 2 * symmetric - t2i)


def test_module_is_the_functional_and_is_registered():
    f, fp, fn = _emb(3, 8, seed=7), _emb(3, 8, seed=8), _emb(3, 8, seed=9)
    loss_fn = LOSSES.build({"type": "SupervisedSimCSELoss", "temperature": 0.05})
    assert type(loss_fn) is SupervisedSimCSELoss and loss_fn.get_config_dict() == {"temperature": 0.05, "gather": None}
    torch.testing.assert_close(loss_fn(f, fp, fn), supervised_simcse(f, fp, fn, temperature=0.05))
    torch.testing.assert_close(loss_fn(f, fp, fn, temperature=0.1), supervised_simcse(f, fp, fn, temperature=0.1))


def test_refuses_mismatched_rows():
    with pytest.raises(ValueError, match=r"positive_emb must match anchor_emb, one positive per anchor: "
                                         r"expected \(3, 8\), found \(2, 8\)"):
        supervised_simcse(_emb(3, 8), _emb(2, 8))
    with pytest.raises(ValueError, match="one hard negative per anchor"):
        supervised_simcse(_emb(3, 8), _emb(3, 8), _emb(4, 8))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        supervised_simcse(_emb(3, 8), _emb(3, 8), temperature=0.0)


def test_docstring_examples_run():
    module = importlib.import_module("vlr_plugins.losses.simcse")
    assert doctest.testmod(module).failed == 0


# -- two gloo processes -----------------------------------------------------------------

def _triplets():
    return [tuple(_emb(3, 6, seed=10 * r + k) for k in range(3)) for r in range(WORLD_SIZE)]


def _loss_and_grads(local, gather):
    leaves = [x.clone().requires_grad_() for x in local]
    loss = supervised_simcse(*leaves, temperature=0.05, gather=gather)
    loss.backward()
    return {"loss": loss.detach(), **{k: x.grad for k, x in zip(("anchor", "positive", "negative"), leaves)}}


def _rank_results(rank):
    return _loss_and_grads(_triplets()[rank], None)


@pytest.mark.timeout(120)
def test_two_processes_equal_one_process_on_the_whole_batch(tmp_path):
    results = run_on_ranks(_rank_results, WORLD_SIZE, tmp_path)
    full = tuple(torch.cat(parts) for parts in zip(*_triplets()))
    single = _loss_and_grads(full, False)
    for r, got in enumerate(results):
        torch.testing.assert_close(got["loss"], single["loss"])
        for name in ("anchor", "positive", "negative"):
            # all_gather's backward sums the WORLD_SIZE identical losses' gradients
            torch.testing.assert_close(got[name], WORLD_SIZE * single[name][3 * r:3 * r + 3])
