"""``cache_chunk`` in open_clip runs: TextBatchCLIP encodes both towers through the gradient
cache, and ``vlr openclip-train --vlr-loss-args '{cache_chunk: n}'`` trains the weights of
the uncached run with open_clip_train's own loop."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("open_clip_train")
import open_clip  # noqa: E402

from vlr_plugins.integrations.open_clip import (  # noqa: E402
    TextBatchCLIP,
    TextItem,
    build_openclip_loss,
    collate_text_batch,
)
from vlr_plugins.integrations.open_clip.train import main  # noqa: E402

TOL = dict(rtol=1e-5, atol=1e-6)


def _run(data: str, logs, *extra: str) -> dict[str, torch.Tensor]:
    """One epoch of open_clip_train on the CPU (8 images, batch 4: two steps); the checkpoint."""
    code = main(["--train-data", data, "--epochs", "1", "--batch-size", "4", "--workers", "0",
                 "--device", "cpu", "--logs", str(logs), "--name", "run", "--lr", "1e-3",
                 "--warmup", "1", "--precision", "fp32", *extra])
    assert code == 0
    return torch.load(logs / "run" / "checkpoints" / "epoch_1.pt", weights_only=True)["state_dict"]


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_both_towers_get_the_uncached_gradients(tiny_model):
    torch.manual_seed(0)
    # float64: the chunked pass sums the embedding tables' gradients in another order, which in
    # float32 differs by ~4e-6 on entries of ~5 (seen on an AMD Zen CPU); the equality checked
    # is the math's, not one summation order's
    model = open_clip.create_model(tiny_model, output_dict=True).double()
    tok = open_clip.get_tokenizer(tiny_model)
    g = torch.Generator().manual_seed(1)
    images, batch = collate_text_batch([
        (torch.randn(3, 32, 32, generator=g), TextItem("a", tok(["one", "two"]), tok(["not one"]))),
        (torch.randn(3, 32, 32, generator=g), TextItem("b", tok(["three"]), tok(["not three"]))),
        (torch.randn(3, 32, 32, generator=g), TextItem("c", tok(["four", "five", "six"]))),
    ])
    images = images.double()
    loss_fn = build_openclip_loss({"type": "HardNegativeInfoNCELoss", "cache_chunk": 2,
                                   "label_smoothing": 0.1})
    assert loss_fn.cache_chunk == 2
    results = []
    for chunk in (loss_fn.cache_chunk, None):
        model.zero_grad(set_to_none=True)
        out = TextBatchCLIP(model, cache_chunk=chunk)(images, batch)
        loss = loss_fn(**out, output_dict=True)["contrastive_loss"]
        loss.backward()
        results.append((loss.detach(), _grads(model)))
    (loss, grads), (ref_loss, ref_grads) = results
    torch.testing.assert_close(loss, ref_loss, **TOL)
    assert grads.keys() == ref_grads.keys()
    assert {"visual.conv1.weight", "token_embedding.weight", "logit_scale"} <= grads.keys()
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], **TOL, msg=name)


def test_the_loss_switch_trains_the_uncached_weights(tiny_model, tiny_data, tmp_path, restore_logging):
    torch.manual_seed(0)
    before = open_clip.create_model(tiny_model).state_dict()
    init = tmp_path / "init.pt"
    torch.save({"state_dict": before}, init)
    views = ("{positives: [{field: caption, max_tokens: 77}, {field: positives, max_tokens: 77}]}")
    saved = {}
    for chunk in (None, 3):
        extra = ["--vlr-loss-args", f"{{cache_chunk: {chunk}}}"] if chunk else []
        saved[chunk] = _run(tiny_data["jsonl"], tmp_path / f"logs{chunk}", "--model", tiny_model,
                            "--pretrained", str(init), "--vlr-loss", "MultiPositiveInfoNCELoss",
                            "--vlr-text-views", views, *extra)
    moved = {k for k in before if not torch.equal(before[k], saved[3][k])}
    assert {"visual.conv1.weight", "token_embedding.weight"} <= moved
    width = 32  # TINY_CONFIG's towers
    for name, expected in saved[None].items():
        got = saved[3][name]
        if name.endswith("attn.in_proj_bias"):
            # the key bias adds a constant to each query's scores, which the softmax removes:
            # its true gradient is 0, its computed one rounding noise in either run, and
            # AdamW turns noise of any size into full steps, so only q and v are compared
            got, expected = torch.cat([got[:width], got[2 * width:]]), torch.cat(
                [expected[:width], expected[2 * width:]])
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, msg=name)
