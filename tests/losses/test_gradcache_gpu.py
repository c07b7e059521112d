"""cached_encode on a GPU: the CUDA random state (dropout) is replayed, and CUDA autocast
with a GradScaler (as MMEngine's AmpOptimWrapper, open_clip_train and LAVIS use it) gives
the gradients of the uncached encoding.

Marked ``gpu``: skips without CUDA; ``benchmarks/gpu_check.sh`` requires it.
"""

from __future__ import annotations

import copy

import pytest
import torch

pytestmark = pytest.mark.gpu


def _step(encoder, ids, mask, image, owner, *, cached, dtype, scaler=None):
    """Loss and unscaled gradients of one step; the reference keeps every chunk's graph, so
    it draws the same dropout masks as the cached pass."""
    from vlr_plugins.losses import MultiPositiveInfoNCELoss, cached_encode

    encoder.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    torch.cuda.manual_seed(1)
    # the reference without autocast's weight cache: with it, all its chunks share one
    # low-precision copy of each weight, whose gradient is then summed in low precision
    with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32, cache_enabled=cached):
        if cached:
            emb = cached_encode(encoder, ids, mask, chunk_size=4, parameters=encoder)
        else:
            emb = torch.cat([encoder(i, m) for i, m in zip(ids.split(4), mask.split(4))])
        loss = MultiPositiveInfoNCELoss()(image, emb.float(), owner)
    (scaler.scale(loss) if scaler is not None else loss).backward()
    scale = scaler.get_scale() if scaler is not None else 1.0
    grads = {n: p.grad.float() / scale for n, p in encoder.named_parameters() if p.grad is not None}
    after = torch.cuda.get_rng_state(), torch.get_rng_state()
    return loss.detach(), grads, after


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2), (torch.float16, 1e-2)])
def test_cuda_dropout_and_autocast_give_the_uncached_gradients(tiny_encoder_cfg, dtype, tol):
    from vlr_plugins.registry import MODELS

    cfg = copy.deepcopy(tiny_encoder_cfg)
    cfg["config"].update(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    torch.manual_seed(0)
    encoder = MODELS.build(cfg).cuda().train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 40, (14, 12), generator=g).cuda()
    mask = torch.ones_like(ids)
    owner = (torch.arange(14) // 3).cuda()
    image = torch.randn(5, 32, generator=g).cuda()
    scaler = torch.amp.GradScaler("cuda") if dtype == torch.float16 else None
    loss, grads, after = _step(encoder, ids, mask, image, owner, cached=True, dtype=dtype, scaler=scaler)
    ref_loss, ref_grads, ref_after = _step(encoder, ids, mask, image, owner, cached=False, dtype=dtype,
                                           scaler=scaler)
    torch.testing.assert_close(loss, ref_loss, rtol=tol, atol=tol)
    assert grads.keys() == ref_grads.keys() and len(grads) > 10
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=tol, atol=tol, msg=name)
    assert all(torch.equal(a, b) for a, b in zip(after, ref_after)), "backward must leave the generators alone"
