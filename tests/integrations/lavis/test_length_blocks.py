"""``model.length_blocks`` in a LAVIS run (``lavis/c5`` ships 2): blip_retrieval_textonly's
forward encodes a batch's captions and paragraphs in blocks cut to their own length, and
LAVIS' ``train_step`` + ``loss.backward()`` gives the loss and gradients of one block, with
and without gradient caching; bad values are refused naming the file and the key."""

from __future__ import annotations

import pytest

pytest.importorskip("lavis", reason="LAVIS lives in its own environment (docs/lavis.md)")

import torch  # noqa: E402

import vlr_plugins.integrations.lavis  # noqa: E402,F401
from vlr_plugins.errors import ConfigError  # noqa: E402
from _lavis_run import build_run  # noqa: E402


def _step(task, model, samples):
    """Loss and gradients of one ``train_step``, and the widths the text encoder saw."""
    widths = []
    handle = model.text_encoder.register_forward_pre_hook(lambda m, args: widths.append(tuple(args[0].shape)))
    model.train()
    model.zero_grad(set_to_none=True)
    try:
        loss = task.train_step(model, samples)
    finally:
        handle.remove()
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}, widths


@pytest.mark.parametrize("cache", [(), ("model.loss.cache_chunk=3",)])
def test_length_blocks_give_the_one_block_loss_and_gradients(write_run_config, tiny_world, tiny_model_options,
                                                              cache):
    task, datasets, blocks = build_run(write_run_config, tiny_world, tiny_model_options, *cache)
    _, _, one = build_run(write_run_config, tiny_world, tiny_model_options, "model.length_blocks=1")
    assert blocks.length_blocks == 2 and one.length_blocks == 1  # lavis/c5's, and the option's
    one.load_state_dict(blocks.state_dict())
    dataset = datasets["vlr_paragraph"]["train"]
    samples = dataset.collater([dataset[i] for i in range(8)])
    loss, got, widths = _step(task, blocks, samples)
    ref_loss, expected, ref_widths = _step(task, one, samples)
    assert len(ref_widths) == 1 and ref_widths[0][0] == 16  # a caption and a paragraph per image
    if not cache:  # two blocks, the shorter one cut below the paragraphs' width
        assert len(widths) == 2 and sum(w[0] for w in widths) == 16 and widths[0][1] < widths[1][1]
    torch.testing.assert_close(loss, ref_loss, rtol=1e-5, atol=1e-6)
    assert got.keys() == expected.keys() and any(n.startswith("text_proj.") for n in got)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("value, found", [("0", "0"), ("-1", "-1"), ("1.5", "1.5"), ("two", "'two'")])
def test_a_bad_length_blocks_is_refused_naming_the_file_and_key(write_run_config, tiny_world, tiny_model_options,
                                                                value, found):
    with pytest.raises(ConfigError, match=rf"run\.yaml: model\.length_blocks must be an integer >= 1.*"
                                          rf"found {found}"):
        build_run(write_run_config, tiny_world, tiny_model_options, f"model.length_blocks={value}")
