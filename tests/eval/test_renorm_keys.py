"""renorm_keys.uniform_: every element of a view through the same exp2 / exp code, so that
equal scores get equal keys wherever they sit in a tile or a row; QueryBankKeys and
DualSoftmaxKeys: QB-Norm's and the dual softmax's keys the plain formula's bits."""

from __future__ import annotations

import math

import pytest
import torch

from vlr_plugins.eval.renorm_keys import SLACK, DualSoftmaxKeys, QueryBankKeys, uniform_, with_slack


def _values(n=4000, seed=0):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 60


@pytest.mark.parametrize("op, dtype", [("exp2", torch.float32), ("exp", torch.float64)])
@pytest.mark.parametrize("width, stride", [(37, 48), (5, 5), (1, 16), (65, 65)])
def test_equal_inputs_get_equal_bits_in_every_column(op, dtype, width, stride):
    values = _values().to(dtype)
    rows = 7
    buffer = with_slack(rows, stride, dtype=dtype)
    view = buffer[:, :width]
    for v in values[:200]:
        view.fill_(v)
        uniform_(view, op)
        assert bool((view == view[0, 0]).all()), f"{op}({float(v)}) differs between positions"
    # and it is the vectorised result: the same bits as a contiguous run of whole vectors
    whole = values[:64].clone()
    getattr(whole, f"{op}_")()
    view[0, :min(width, 64)] = values[:min(width, 64)]
    uniform_(view, op)
    assert torch.equal(view[0, :min(width, 64)], whole[:min(width, 64)])


@pytest.mark.parametrize("threads", [1, 2])
def test_a_view_longer_than_one_call_on_one_or_two_threads(threads):
    """Past ATen's grain size: in one call on one thread (the engine's workers), in calls that
    are never split among threads otherwise; the same bits wherever an input sits."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        buffer = with_slack(300, 2112)
        view = buffer[:, :2084]
        for v in _values().float()[:20]:
            view.fill_(v)
            uniform_(view, "exp2")
            assert bool((view == view[0, 0]).all()), f"exp2({float(v)}) differs between positions"
    finally:
        torch.set_num_threads(before)


def test_without_it_equal_inputs_differ_on_this_cpu():
    """What uniform_ removes: a plain exp2_ of a view with short rows sends the last elements of
    each row through ATen's scalar exp2; where that differs from the vector code (most CPUs:
    libm against SLEEF), equal scores get different keys."""
    view = with_slack(7, 48)[:, :37]
    for v in _values().float()[:400]:
        view.fill_(v)
        view.exp2_()
        if not bool((view == view[0, 0]).all()):
            return
    pytest.skip("this CPU's scalar and vector exp2 agree on every tested input")


def test_needs_contiguous_rows_and_slack_is_documented():
    with pytest.raises(ValueError, match="contiguous"):
        uniform_(with_slack(4, 4).T, "exp2")
    assert with_slack(3, 5).untyped_storage().nbytes() == (15 + SLACK) * 4


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("masked", [False, True])
def test_query_bank_keys_are_the_plain_formulas_bits(threads, masked):
    """Every key ``s * beta / ln 2 - log2 Z`` bit for bit as ``torch.mul`` then ``sub_`` give it
    (the formula the numba counter and the papers' code follow), in tile views of padded rows
    for both directions and in whole rows; a query left raw keeps its score."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(1)
        n_items, n_texts, beta = 300, 700, 20.0
        log_z = {"t2i": torch.randn(n_items, generator=gen) * 40,
                 "i2t": torch.randn(n_texts, generator=gen) * 40}
        chosen = {"t2i": torch.rand(n_texts, generator=gen) < 0.5 if masked else None,
                  "i2t": torch.rand(n_items, generator=gen) < 0.5 if masked else None}
        keys = QueryBankKeys(beta, (log_z["t2i"], chosen["t2i"]), (log_z["i2t"], chosen["i2t"]))
        beta2 = beta / math.log(2.0)

        def plain(scores, lz, mask):
            out = torch.mul(scores, beta2)
            out.sub_(lz)
            return out if mask is None else torch.where(mask, out, scores)

        scores = torch.rand(n_items, n_texts, generator=gen) * 2 - 1
        scores[0, :50] = scores[1, 0]  # equal scores in one row
        (a0, a1), (t0, t1) = (40, 200), (100, 613)  # a tile of padded rows, as the grouped pass's
        buffers = torch.empty(2, a1 - a0, 528)
        tile, spare = buffers[0][:, :t1 - t0], buffers[1][:, :t1 - t0]
        tile.copy_(scores[a0:a1, t0:t1])
        t2i = keys.t2i_tile(tile, (a0, a1), (t0, t1), spare, None)
        mask = None if chosen["t2i"] is None else chosen["t2i"][None, t0:t1]
        assert torch.equal(t2i, plain(tile, log_z["t2i"][a0:a1, None], mask))
        i2t = keys.i2t_tile(tile, (a0, a1), (t0, t1), spare, None)
        mask = None if chosen["i2t"] is None else chosen["i2t"][a0:a1, None]
        assert torch.equal(i2t, plain(tile, log_z["i2t"][None, t0:t1], mask))
        queries = torch.tensor([3, 0, 299, 17])
        for direction, rows in (("t2i", scores.T[queries].contiguous()), ("i2t", scores[queries])):
            mask = None if chosen[direction] is None else chosen[direction][queries][:, None]
            expected = plain(rows, log_z[direction][None, :], mask)
            assert torch.equal(keys.rows(direction, rows, queries), expected)
            assert torch.equal(keys.direct_rows(direction, rows, queries), expected.double())
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("threads", [1, 2])
def test_dual_softmax_keys_are_the_plain_formulas_bits(threads):
    """The factored keys ``p * 2^(c - L)``, ``p = s * exp2(s * tau / ln 2 - c)``, bit for bit as
    ``torch.mul``, ``sub_``, the exponential (through ``uniform_``) and two ``mul`` give them, in a
    tile of padded rows (both directions from one buffer, as the grouped pass makes them) and in
    whole rows; the text-to-image keys survive the image-to-text ones."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(2)
        n_items, n_texts, tau = 300, 700, 100.0
        keys = DualSoftmaxKeys(tau, torch.randn(n_items, generator=gen) * 3 + 60,
                               torch.randn(n_texts, generator=gen) * 3 + 58)
        assert keys.shift is not None  # factored
        tau2 = tau / math.log(2.0)

        def plain(scores, factor):
            e = with_slack(*scores.shape)
            torch.mul(scores, tau2, out=e)
            e.sub_(keys.shift)
            return uniform_(e, "exp2").mul_(scores).mul_(factor)

        scores = torch.rand(n_items, n_texts, generator=gen) * 0.8 - 0.2
        scores[0, :50] = scores[1, 0]  # equal scores in one row
        (a0, a1), (t0, t1) = (40, 200), (100, 613)
        buffers = torch.empty(2, (a1 - a0) * 528 + SLACK)
        tile, spare = (b[:(a1 - a0) * 528].view(a1 - a0, 528)[:, :t1 - t0] for b in buffers)
        tile.copy_(scores[a0:a1, t0:t1])
        t2i = keys.t2i_tile(tile, (a0, a1), (t0, t1), spare, None).clone()
        i2t = keys.i2t_tile(tile, (a0, a1), (t0, t1), spare, None)
        raw = scores[a0:a1, t0:t1]
        assert torch.equal(t2i, plain(raw, keys.item_factor[a0:a1, None]))
        assert torch.equal(i2t, plain(raw, keys.text_factor[None, t0:t1]))
        queries = torch.tensor([3, 0, 299, 17])
        for direction, rows in (("t2i", scores.T[queries].contiguous()), ("i2t", scores[queries])):
            factor = (keys.item_factor if direction == "t2i" else keys.text_factor)[None, :]
            assert torch.equal(keys.rows(direction, rows, queries), plain(rows, factor))
    finally:
        torch.set_num_threads(before)
