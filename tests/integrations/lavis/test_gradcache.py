"""``model.loss.cache_chunk`` in a LAVIS run: blip_retrieval_textonly's forward encodes the
texts through the gradient cache, LAVIS' own ``train_step`` + ``loss.backward()`` gives the
uncached gradients, and LAVIS' epoch loop trains with it."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("lavis", reason="LAVIS lives in its own environment (docs/lavis.md)")

import torch  # noqa: E402

import vlr_plugins.integrations.lavis  # noqa: E402,F401
from _lavis_run import build_run, train_one_epoch  # noqa: E402


def _graph_names(t: torch.Tensor) -> set[str]:
    seen, stack = set(), [t.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None and node not in seen:
            seen.add(node)
            stack.extend(n for n, _ in node.next_functions)
    return {type(n).__name__ for n in seen}


def test_the_option_gives_the_uncached_gradients(write_run_config, tiny_world, tiny_model_options):
    torch.manual_seed(0)
    task, datasets, cached = build_run(write_run_config, tiny_world, tiny_model_options,
                                    "model.loss.cache_chunk=3")
    _, _, plain = build_run(write_run_config, tiny_world, tiny_model_options)
    assert cached.loss_fn.cache_chunk == 3 and getattr(plain.loss_fn, "cache_chunk", None) is None
    plain.load_state_dict(cached.state_dict())
    dataset = datasets["vlr_paragraph"]["train"]
    samples = dataset.collater([dataset[i] for i in range(8)])
    grads = []
    for model in (cached, plain):
        model.train()
        model.zero_grad(set_to_none=True)
        loss = task.train_step(model, samples)
        assert ("_CachedEncodeBackward" in _graph_names(loss)) == (model is cached)
        loss.backward()
        grads.append((loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}))
    (loss, got), (ref_loss, expected) = grads
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    assert got.keys() == expected.keys() and any(n.startswith("text_proj.") for n in got)
    for name in expected:
        # The cache sums each parameter's gradient chunk by chunk, the plain run over the whole
        # batch: float32 in another order. An entry near zero that sums large terms (a word
        # embedding row of a frequent token) keeps an error of a few eps times the largest
        # term, so the absolute tolerance scales with the gradient (measured: <= 2.2e-7 x max
        # over 12 seeds); a wrong gradient is off by orders of magnitude more.
        scale = max(1.0, float(expected[name].abs().max()))
        torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-6 * scale, msg=name)


def test_lavis_trains_an_epoch_with_the_cache(write_run_config, tiny_world, tiny_model_options):
    task, datasets, model = build_run(write_run_config, tiny_world, tiny_model_options,
                                   "model.loss.cache_chunk=4")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(0)
    stats = train_one_epoch(task, model, datasets["vlr_paragraph"]["train"])
    assert math.isfinite(float(stats["loss"]))
    after = model.state_dict()
    assert any(k.startswith("text_proj.") and not torch.equal(before[k], after[k]) for k in before)
