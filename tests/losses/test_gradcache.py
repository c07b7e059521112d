"""cached_encode (GradCache): loss and every parameter's gradient against the uncached
encoding, on the BLIP-shaped tiny text encoder with dropout on, on two gloo processes under
DistributedDataParallel, under CPU autocast; and the errors it raises."""

from __future__ import annotations

import copy
import doctest
import importlib
import warnings

import pytest
import torch
from _gloo import run_on_ranks
from torch import nn

from vlr_plugins.losses import (
    HardNegativeInfoNCELoss,
    MultiPositiveInfoNCELoss,
    PrimaryComponentMatchingLoss,
    cached_encode,
)
from vlr_plugins.losses import gradcache as gradcache_module

WORLD_SIZE = 2
TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def blip_encoder(tiny_encoder_cfg):
    """The tiny BLIP text encoder of tests/conftest.py, with dropout 0.1 (train mode: on)."""
    from vlr_plugins.registry import MODELS

    cfg = copy.deepcopy(tiny_encoder_cfg)
    cfg["config"].update(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    torch.manual_seed(0)
    return MODELS.build(cfg).train()


def _tokens(n: int, length: int = 12, vocab: int = 40, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (n, length), generator=g)
    mask = torch.ones_like(ids)
    for row in range(0, n, 3):  # some padded rows
        mask[row, length - 1 - row % 5 :] = 0
    return ids, mask


def _grads(module: nn.Module, *extra: torch.Tensor) -> dict[str, torch.Tensor]:
    out = {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}
    out.update({f"extra{i}": t.grad.clone() for i, t in enumerate(extra)})
    return out


def _step(encoder, loss_of, ids, mask, *, chunk, cached, seed=1):
    """Loss, gradients and the next random number after one step. The uncached reference
    keeps the graph of every chunk: it draws the same dropout masks as the cached pass."""
    encoder.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    if cached:
        emb = cached_encode(encoder, ids, mask, chunk_size=chunk, parameters=encoder)
    elif chunk is None:
        emb = encoder(ids, mask)
    else:
        emb = torch.cat([encoder(i, m) for i, m in zip(ids.split(chunk), mask.split(chunk))])
    loss, extra = loss_of(emb)
    loss.backward()
    return loss.detach(), _grads(encoder, *extra), torch.rand(3)


def _assert_same(got, expected):
    loss, grads, after = got
    ref_loss, ref_grads, ref_after = expected
    torch.testing.assert_close(loss, ref_loss, **TOL)
    assert grads.keys() == ref_grads.keys() and len(grads) > 10
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], **TOL, msg=name)
    assert torch.equal(after, ref_after), "the backward pass must leave the random generator alone"


def _image(rows: int, seed: int = 3) -> torch.Tensor:
    return torch.randn(rows, 32, generator=torch.Generator().manual_seed(seed), requires_grad=True)


def _multi_positive(num_texts: int):
    """Three captions per image (the last image fewer), a learnable temperature."""
    owner = torch.arange(num_texts) // 3
    image = _image(int(owner[-1]) + 1)
    loss_fn = MultiPositiveInfoNCELoss(learnable_temperature=True)

    def loss_of(emb):
        loss_fn.temperature.grad = image.grad = None
        return loss_fn(image, emb, owner), (loss_fn.temperature, image)

    return loss_of


def _hard_negatives(num_texts: int):
    """Nine captions of five images, then hard negatives of their own images, smoothed."""
    owner = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3, 4])
    neg_owner = torch.arange(num_texts - 9) % 5
    image = _image(5)
    loss_fn = HardNegativeInfoNCELoss(hard_negative_scope="own", variant="log_sum", label_smoothing=0.1)

    def loss_of(emb):
        image.grad = None
        return loss_fn(image, emb[:9], owner, emb[9:], neg_owner), (image,)

    return loss_of


def _primary_components(num_texts: int):
    """Long captions, then short ones; Long-CLIP's label smoothing."""
    half = num_texts // 2
    image = _image(half)
    loss_fn = PrimaryComponentMatchingLoss(num_components=2, temperature=0.05, label_smoothing=0.1)

    def loss_of(emb):
        image.grad = None
        return loss_fn(image, emb[:half], emb[half:]), (image,)

    return loss_of


LOSSES = {"multi_positive": _multi_positive, "hard_negatives": _hard_negatives,
          "primary_components": _primary_components}


@pytest.mark.parametrize("loss", sorted(LOSSES))
@pytest.mark.parametrize("chunk", [1, 4, 5])
def test_dropout_on_equals_the_uncached_encoding(blip_encoder, loss, chunk):
    ids, mask = _tokens(14)
    loss_of = LOSSES[loss](14)
    got = _step(blip_encoder, loss_of, ids, mask, chunk=chunk, cached=True)
    expected = _step(blip_encoder, loss_of, ids, mask, chunk=chunk, cached=False)
    _assert_same(got, expected)
    # dropout is on: another seed draws other masks and another loss
    other = _step(blip_encoder, loss_of, ids, mask, chunk=chunk, cached=False, seed=2)
    assert (other[0] - expected[0]).abs() > 1e-4


def test_without_dropout_equals_one_pass_over_the_whole_batch(blip_encoder):
    ids, mask = _tokens(13)
    loss_of = _multi_positive(13)
    blip_encoder.eval()
    try:
        got = _step(blip_encoder, loss_of, ids, mask, chunk=4, cached=True)
        expected = _step(blip_encoder, loss_of, ids, mask, chunk=None, cached=False)
    finally:
        blip_encoder.train()
    _assert_same(got, expected)


def test_replaying_the_random_state_is_what_makes_it_exact(blip_encoder, monkeypatch):
    """With the replay disabled the second pass draws new dropout masks, and the gradients
    are those of a different function."""
    ids, mask = _tokens(12)
    loss_of = _multi_positive(12)
    expected = _step(blip_encoder, loss_of, ids, mask, chunk=4, cached=False)

    class NoReplay(gradcache_module._RandomState):
        def replay(self):
            return torch.random.fork_rng(devices=[])

    monkeypatch.setattr(gradcache_module, "_RandomState", NoReplay)
    _, grads, _ = _step(blip_encoder, loss_of, ids, mask, chunk=4, cached=True)
    assert any(not torch.allclose(grads[n], expected[1][n], **TOL) for n in expected[1])


class _Saved:
    """A tensor saved for backward, counted while its graph holds it."""

    live = peak = 0

    def __init__(self, t: torch.Tensor) -> None:
        self.t, self.size = t, t.numel()
        _Saved.live += self.size
        _Saved.peak = max(_Saved.peak, _Saved.live)

    def __del__(self) -> None:
        _Saved.live -= self.size


def _peak_saved(chunk: int | None) -> int:
    encoder = nn.Sequential(nn.Linear(6, 32), nn.GELU(), nn.Linear(32, 8))
    _Saved.live = _Saved.peak = 0
    with torch.autograd.graph.saved_tensors_hooks(_Saved, lambda saved: saved.t):
        emb = cached_encode(encoder, torch.randn(40, 6), chunk_size=chunk, parameters=encoder)
        emb.pow(2).sum().backward()
    return _Saved.peak


def test_only_one_chunk_of_encoder_graph_exists_at_a_time():
    """Elements saved for backward at the peak: the whole batch's activations without the
    cache, one chunk's (plus the loss's) with it."""
    full, chunked = _peak_saved(None), _peak_saved(8)
    per_row = 6 + 32 + 32  # the inputs of the two linear layers and of the GELU
    assert full >= 40 * per_row
    assert chunked <= 8 * per_row + 40 * 8  # one chunk's activations and the embeddings


def test_autocast_state_is_replayed_on_the_cpu():
    """bfloat16 autocast in the forward pass, backward outside it (as the trainers do). The
    reference turns autocast's weight cache off: with it on, all its chunks share one bf16
    copy of each weight, whose gradient is then summed in bf16 rather than float32."""
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(16, 32), nn.Dropout(0.2), nn.GELU(), nn.Linear(32, 8))
    x = torch.randn(11, 16)
    image = torch.randn(11, 8)

    def run(cached):
        encoder.zero_grad(set_to_none=True)
        torch.manual_seed(7)
        with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=cached):
            if cached:
                emb = cached_encode(encoder, x, chunk_size=3, parameters=encoder)
            else:
                emb = torch.cat([encoder(c) for c in x.split(3)])
            assert emb.dtype == torch.bfloat16
            loss = MultiPositiveInfoNCELoss()(image, emb.float())
        loss.backward()
        return loss.detach(), _grads(encoder)

    (loss, grads), (ref_loss, ref_grads) = run(True), run(False)
    torch.testing.assert_close(loss, ref_loss, **TOL)
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], **TOL, msg=name)


def test_without_gradient_or_caching_it_is_a_plain_encoding():
    encoder = nn.Linear(4, 3)
    x = torch.randn(10, 4)
    assert torch.equal(cached_encode(encoder, x, chunk_size=None, parameters=encoder), encoder(x))
    with torch.no_grad():
        out = cached_encode(encoder, x, chunk_size=3, parameters=encoder)
    assert not out.requires_grad
    torch.testing.assert_close(out, encoder(x).detach())
    small = cached_encode(encoder, x, chunk_size=10, parameters=encoder)  # one chunk: one plain call
    assert small.grad_fn is not None and "Cached" not in type(small.grad_fn).__name__
    frozen = cached_encode(encoder, x, chunk_size=3, parameters=())  # nothing trains: chunks only
    assert "Cat" in type(frozen.grad_fn).__name__


def test_gradient_accumulates_into_existing_gradients():
    encoder = nn.Linear(4, 3)
    x = torch.randn(9, 4)
    for cached in (False, True):
        encoder.zero_grad(set_to_none=True)
        for _ in range(2):
            emb = cached_encode(encoder, x, chunk_size=2 if cached else None, parameters=encoder)
            emb.square().sum().backward()
        grads = _grads(encoder)
        if not cached:
            expected = grads
    for name in expected:
        torch.testing.assert_close(grads[name], expected[name])


@pytest.mark.parametrize("call, error, message", [
    (lambda enc, x: cached_encode(enc, x, chunk_size=0, parameters=enc), ValueError,
     r"cached_encode: chunk_size must be an integer >= 1 .* found 0"),
    (lambda enc, x: cached_encode(enc, x.requires_grad_(), chunk_size=2, parameters=enc), ValueError,
     r"inputs\[0\] requires gradient"),
    (lambda enc, x: cached_encode(lambda a, b: enc(a), x, x[:3], chunk_size=2, parameters=enc), ValueError,
     r"share their first dimension .* \[6, 3\]"),
    (lambda enc, x: cached_encode(lambda a: enc(a)[:1], x, chunk_size=2, parameters=enc), ValueError,
     r"one embedding per input row; chunk 0 has 2 rows and it returned \(1, 3\)"),
    (lambda enc, x: cached_encode(nn.BatchNorm1d(4), x, chunk_size=2, parameters=nn.BatchNorm1d(4)),
     ValueError, r"BatchNorm1d\) normalises with the statistics of the rows it sees"),
])
def test_refusals(call, error, message):
    with pytest.raises(error, match=message):
        call(nn.Linear(4, 3), torch.randn(6, 4))


def test_a_trainable_tensor_outside_parameters_is_an_error_at_backward():
    first, second = nn.Linear(4, 5), nn.Linear(5, 3)
    emb = cached_encode(lambda x: second(first(x)), torch.randn(6, 4), chunk_size=2, parameters=first)
    with pytest.raises(RuntimeError, match=r"reads 2 trainable tensors that are not in `parameters` "
                                           r"\(shapes \[\(3, 5\), \(3,\)\]|\[\(3,\), \(3, 5\)\]"):
        emb.sum().backward()


def test_a_second_backward_is_refused_with_a_reason():
    encoder = nn.Linear(4, 3)
    emb = cached_encode(encoder, torch.randn(6, 4), chunk_size=2, parameters=encoder)
    loss = emb.square().sum()
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match=r"cached_encode: a second backward .* not supported"):
        loss.backward()


def test_a_parameter_the_encoder_does_not_read_gets_no_gradient_and_a_warning(monkeypatch):
    monkeypatch.setattr(gradcache_module, "_warned_unused", False)
    encoder, unused = nn.Linear(4, 3), nn.Linear(2, 2)
    emb = cached_encode(encoder, torch.randn(6, 4), chunk_size=2,
                        parameters=[*encoder.parameters(), *unused.parameters()])
    with pytest.warns(UserWarning, match=r"2 of the 4 tensors in `parameters` are not read"):
        emb.sum().backward()
    assert unused.weight.grad is None and encoder.weight.grad is not None
    emb = cached_encode(encoder, torch.randn(6, 4), chunk_size=2,
                        parameters=[*encoder.parameters(), *unused.parameters()])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process
        emb.sum().backward()


class _TwoBranches(nn.Module):
    """Rows with a positive first feature go through ``a``, the others through ``b``: a chunk
    of one kind reads one branch (as a dual-CLS encoder's chunk of one view reads one head)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 3), nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x[:, 0] > 0).all()):
            return self.a(x)
        if bool((x[:, 0] <= 0).all()):
            return self.b(x)
        return torch.where(x[:, :1] > 0, self.a(x), self.b(x))


def test_branches_read_by_different_chunks_are_not_warned_about(monkeypatch):
    """Unread parameters are counted over the whole step: the first chunk reads only ``a``,
    the second only ``b``; both get their uncached gradients and nothing is warned."""
    monkeypatch.setattr(gradcache_module, "_warned_unused", False)
    torch.manual_seed(0)
    encoder = _TwoBranches()
    x = torch.randn(4, 4)
    x[:2, 0], x[2:, 0] = x[:2, 0].abs() + 0.1, -x[2:, 0].abs()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cached_encode(encoder, x, chunk_size=2, parameters=encoder).square().sum().backward()
    got = [p.grad.clone() for p in encoder.parameters()]
    encoder.zero_grad()
    encoder(x).square().sum().backward()
    for g, p in zip(got, encoder.parameters()):
        torch.testing.assert_close(g, p.grad)
    encoder.zero_grad()  # one kind of row only: ``b`` is read by no chunk, and that is warned
    with pytest.warns(UserWarning, match=r"2 of the 4 tensors in `parameters` are not read"):
        cached_encode(encoder, x[:2], chunk_size=1, parameters=encoder).sum().backward()
    assert encoder.b.weight.grad is None and encoder.a.weight.grad is not None


class _BagEncoder(nn.Module):
    """Token ids -> embeddings: embedding bag, dropout, projection (fast to build per rank)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(30, 12)
        self.drop = nn.Dropout(0.3)
        self.proj = nn.Linear(12, 6)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.proj(self.drop(self.embed(ids)).mean(1))


class _Model(nn.Module):
    """What a trainer wraps in DistributedDataParallel: its forward encodes with the cache."""

    def __init__(self, chunk: int, cached: bool) -> None:
        super().__init__()
        torch.manual_seed(0)  # the same initial weights on every rank and in both runs
        self.encoder = _BagEncoder()
        self.chunk, self.cached = chunk, cached

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.cached:
            return cached_encode(self.encoder, ids, chunk_size=self.chunk, parameters=self.encoder)
        return torch.cat([self.encoder(c) for c in ids.split(self.chunk)])


def _ddp_rank(rank: int) -> dict:
    from torch.nn.parallel import DistributedDataParallel

    g = torch.Generator().manual_seed(10 + rank)
    rows = 7 + rank  # ranks hold different numbers of captions
    ids = torch.randint(0, 30, (rows, 5), generator=g)
    image = torch.randn(4, 6, generator=g)
    owner = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3][:rows] + [3] * max(0, rows - 8))
    out = {}
    for cached in (False, True):
        model = DistributedDataParallel(_Model(chunk=3, cached=cached))
        torch.manual_seed(100 + rank)
        emb = model(ids)
        loss = MultiPositiveInfoNCELoss(gather=None)(image, emb, owner)  # gathers both ranks
        loss.backward()
        out[cached] = {"loss": loss.detach(), **{n: p.grad for n, p in model.module.named_parameters()}}
    return out


def test_distributed_data_parallel_with_the_gather(tmp_path):
    results = run_on_ranks(_ddp_rank, WORLD_SIZE, tmp_path)
    for rank, result in enumerate(results):
        for name, expected in result[False].items():
            torch.testing.assert_close(result[True][name], expected, **TOL, msg=f"rank {rank}: {name}")
    # DDP averaged the gradients: both ranks hold the same ones
    for name in results[0][True]:
        torch.testing.assert_close(results[0][True][name], results[1][True][name], **TOL)


def test_docstring_example_runs():
    module = importlib.import_module("vlr_plugins.losses.gradcache")
    assert doctest.testmod(module).failed == 0


def test_loss_modules_carry_the_chunk_and_functional_is_unchanged():
    image, text = torch.randn(4, 8), torch.randn(4, 8)
    cached = MultiPositiveInfoNCELoss(cache_chunk=2)
    assert cached.cache_chunk == 2 and MultiPositiveInfoNCELoss().cache_chunk is None
    torch.testing.assert_close(cached(image, text), MultiPositiveInfoNCELoss()(image, text))
