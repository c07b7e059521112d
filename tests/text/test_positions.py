"""Positional tables: the stretch formula, and leading rows kept exactly through training."""

from __future__ import annotations

import doctest
import importlib
from fractions import Fraction

import pytest
import torch

from vlr_plugins.text import freeze_leading_rows, stretch_positional_embedding

# ---------------------------------------------------------------- the formula


def long_clip_reference(pre: torch.Tensor) -> torch.Tensor:
    """Long-CLIP's 77 -> 248 table, written from the paper's recipe as a plain loop.

    20 rows kept; each later row i < 76 becomes 4 rows (4-j)/4 pre[i] + j/4 pre[i+1];
    the last row becomes 4 rows pre[76] + j/4 (pre[76] - pre[75]).
    """
    length, dim = pre.shape
    keep = 20
    out = torch.zeros(4 * length - 3 * keep, dim, dtype=pre.dtype)
    for i in range(keep):
        out[i] = pre[i]
    for i in range(keep, length - 1):
        for j in range(4):
            out[keep + 4 * (i - keep) + j] = (4 - j) * pre[i] / 4 + j * pre[i + 1] / 4
    step = pre[length - 1] - pre[length - 2]
    for j in range(4):
        out[keep + 4 * (length - 1 - keep) + j] = pre[length - 1] + j * step / 4
    return out


def fraction_reference(pre: torch.Tensor, new_length: int, keep: int) -> torch.Tensor:
    """The documented formula row by row, with exact rational source positions."""
    length = pre.shape[0]
    rows = [pre[r] for r in range(keep)]
    for r in range(keep, new_length):
        p = keep + Fraction((r - keep) * (length - keep), new_length - keep)
        i, f = int(p), float(p - int(p))
        if i < length - 1:
            rows.append((1 - f) * pre[i] + f * pre[i + 1])
        else:
            rows.append(pre[-1] + f * (pre[-1] - pre[-2]))
    return torch.stack(rows)


# ---------------------------------------------------------------- the formula


def test_77_to_248_keep_20_is_long_clip_bit_for_bit():
    pre = torch.randn(77, 64, generator=torch.Generator().manual_seed(0))
    assert torch.equal(stretch_positional_embedding(pre, 248, keep=20), long_clip_reference(pre))


@pytest.mark.parametrize("length,new_length,keep", [
    (77, 248, 0), (77, 248, 20), (77, 100, 20), (77, 300, 0), (10, 23, 0), (10, 23, 3),
    (512, 600, 20), (5, 17, 4),
])
def test_general_lengths_follow_the_formula(length, new_length, keep):
    pre = torch.randn(length, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    out = stretch_positional_embedding(pre, new_length, keep=keep)
    assert out.shape == (new_length, 8)
    torch.testing.assert_close(out, fraction_reference(pre, new_length, keep), rtol=0, atol=1e-12)
    assert torch.equal(out[:keep], pre[:keep])
    # Wherever a new row lands exactly on an old one, it is that row.
    for r in range(keep, new_length):
        p = keep + Fraction((r - keep) * (length - keep), new_length - keep)
        if p.denominator == 1:
            assert torch.equal(out[r], pre[int(p)])


@pytest.mark.parametrize("length,new_length,keep", [(77, 248, 20), (77, 248, 0), (10, 23, 3)])
def test_a_linear_table_reads_back_its_source_positions(length, new_length, keep):
    pre = torch.arange(length, dtype=torch.float64).unsqueeze(1)  # row i holds i
    out = stretch_positional_embedding(pre, new_length, keep=keep)[:, 0]
    r = torch.arange(keep, new_length, dtype=torch.float64)
    expected = keep + (r - keep) * (length - keep) / (new_length - keep)
    torch.testing.assert_close(out[keep:], expected, rtol=0, atol=1e-12)
    assert bool((out.diff() > 0).all())  # strictly increasing positions
    assert out[-1] > length - 1 and out[-1] < length  # extrapolated, by less than one step


def test_tail_is_extrapolated_from_the_last_two_rows():
    pre = torch.randn(10, 4, dtype=torch.float64)
    out = stretch_positional_embedding(pre, 40, keep=2)  # factor 38/8 = 4.75
    step = pre[9] - pre[8]
    tail_rows = [r for r in range(2, 40) if 2 + (r - 2) * 8 // 38 == 9]
    assert tail_rows == [36, 37, 38, 39]
    for r in tail_rows:
        f = float(Fraction((r - 2) * 8, 38) - 7)
        torch.testing.assert_close(out[r], pre[9] + f * step, rtol=0, atol=1e-12)


def test_half_precision_keeps_its_dtype():
    pre = torch.randn(77, 8).half()
    out = stretch_positional_embedding(pre, 248)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.float(), long_clip_reference(pre.float()), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("new_length,keep", [(77, 20), (50, 20), (248, 77), (248, -1)])
def test_only_lengthens_with_a_valid_keep(new_length, keep):
    with pytest.raises(ValueError):
        stretch_positional_embedding(torch.randn(77, 8), new_length, keep=keep)


# ---------------------------------------------------------------- frozen rows


def _train(param, optimizer, steps=5, *, step=None):
    """``steps`` of a plain torch loop on a loss that moves every row."""
    target = torch.randn(param.shape, generator=torch.Generator().manual_seed(7))
    for _ in range(steps):
        optimizer.zero_grad()
        ((param - target) ** 2).sum().backward()
        (step or optimizer.step)()


def _assert_kept(before, after, keep):
    assert torch.equal(after[:keep], before[:keep]), "the kept rows are bit-identical"
    assert not torch.isclose(after[keep:], before[keep:]).all(dim=1).any(), "the others moved"


@pytest.mark.parametrize("make", [
    lambda p: torch.optim.AdamW([p], lr=0.1, weight_decay=0.5),
    lambda p: torch.optim.AdamW([p], lr=0.1, weight_decay=0.5, foreach=False),
    lambda p: torch.optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.1),
    lambda p: torch.optim.Adam([{"params": [p], "weight_decay": 0.1}], lr=0.1),
], ids=["AdamW", "AdamW-for-loop", "SGD-momentum", "Adam-param-group"])
def test_kept_rows_stay_bit_identical_under_weight_decay_in_a_plain_loop(make):
    param = freeze_leading_rows(torch.nn.Parameter(torch.randn(12, 4)), 5)
    before = param.detach().clone()
    _train(param, make(param))
    _assert_kept(before, param.detach(), 5)


def test_weight_decay_alone_would_move_the_kept_rows():
    """Why the step hooks exist: the zero gradient does not stop decoupled weight decay."""
    param = torch.nn.Parameter(torch.randn(12, 4))
    before = param.detach().clone()
    optimizer = torch.optim.AdamW([param], lr=0.1, weight_decay=0.5)
    param.register_hook(lambda grad: torch.cat([torch.zeros_like(grad[:5]), grad[5:]]))
    _train(param, optimizer)
    assert not torch.equal(param.detach()[:5], before[:5])


def test_the_rows_kept_are_those_of_the_first_step():
    param = freeze_leading_rows(torch.nn.Parameter(torch.zeros(6, 2)), 2)
    loaded = torch.randn(6, 2)
    with torch.no_grad():
        param.copy_(loaded)  # a checkpoint loaded (or resumed) before training
    _train(param, torch.optim.AdamW([param], lr=0.1, weight_decay=0.5))
    _assert_kept(loaded, param.detach(), 2)


def test_freezing_more_rows_keeps_their_values_from_then_on():
    param = freeze_leading_rows(torch.nn.Parameter(torch.randn(8, 2)), 2)
    optimizer = torch.optim.AdamW([param], lr=0.1, weight_decay=0.5)
    start = param.detach().clone()
    _train(param, optimizer, steps=2)
    now = param.detach().clone()
    freeze_leading_rows(param, 4)
    _train(param, optimizer, steps=2)
    assert torch.equal(param.detach()[:2], start[:2])
    assert torch.equal(param.detach()[2:4], now[2:4])
    assert not torch.isclose(param.detach()[4:], now[4:]).all(dim=1).any()


def test_moving_the_model_keeps_its_rows_frozen():
    model = torch.nn.Embedding(10, 4)
    freeze_leading_rows(model.weight, 3)
    model.to(torch.float64)
    assert model.weight.dtype == torch.float64 and model.weight.frozen_rows == 3
    before = model.weight.detach().clone()
    _train(model.weight, torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.5))
    _assert_kept(before, model.weight.detach(), 3)


def test_other_parameters_of_the_optimizer_train_as_usual():
    frozen = freeze_leading_rows(torch.nn.Parameter(torch.randn(6, 2)), 6)
    free = torch.nn.Parameter(torch.randn(6, 2))
    before = free.detach().clone()
    optimizer = torch.optim.AdamW([frozen, free], lr=0.1, weight_decay=0.5)
    reference = free.detach().clone().requires_grad_()
    plain = torch.optim.AdamW([reference], lr=0.1, weight_decay=0.5)
    _train(free, optimizer)
    _train(reference, plain)
    assert torch.equal(free.detach(), reference.detach()) and not torch.equal(free, before)


def test_mmengine_optim_wrapper_keeps_them():
    optim = pytest.importorskip("mmengine.optim")
    param = freeze_leading_rows(torch.nn.Parameter(torch.randn(12, 4)), 5)
    before = param.detach().clone()
    wrapper = optim.OptimWrapper(torch.optim.AdamW([param], lr=0.1, weight_decay=0.5))
    target = torch.randn(12, 4)
    for _ in range(5):
        wrapper.update_params(((param - target) ** 2).sum())
    _assert_kept(before, param.detach(), 5)


def test_freeze_leading_rows_again_updates_its_hook():
    param = torch.nn.Parameter(torch.ones(6, 2))
    freeze_leading_rows(param, 2)
    freeze_leading_rows(param, 4)
    (param * 3).sum().backward()
    assert param.frozen_rows == 4
    assert torch.equal(param.grad[:4], torch.zeros(4, 2))
    assert torch.equal(param.grad[4:], torch.full((2, 2), 3.0))


def test_a_parameter_without_grad_cannot_be_frozen():
    with pytest.raises(ValueError, match="does not require grad"):
        freeze_leading_rows(torch.nn.Parameter(torch.ones(3, 2), requires_grad=False), 1)


def test_docstring_examples_run():
    module = importlib.import_module("vlr_plugins.text.positions")
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
