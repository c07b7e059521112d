"""encode_in_length_blocks: a mixed-length batch in blocks of similar length gives the
embeddings and every parameter's gradient of one padded block, in the batch's order, for
each text encoder the paragraph and MVC recipes train (BLIP's, BLIP's at an extended
length, the dual-CLS one), also under gradient caching; the split is the cheapest one
(against a brute-force search)."""

from __future__ import annotations

import doctest
import itertools
import warnings

import pytest
import torch
from torch import nn

pytest.importorskip("transformers")

from vlr_plugins.losses import MultiPositiveInfoNCELoss  # noqa: E402
from vlr_plugins.text import (  # noqa: E402
    BlipTextEncoder,
    DualCLSTextEncoder,
    encode_in_length_blocks,
    extend_text_context,
    length_block_bounds,
)
from vlr_plugins.text import length_blocks as length_blocks_module  # noqa: E402

TOL = dict(rtol=1e-5, atol=1e-5)
VOCAB, CLS, SEP = 60, 2, 3
BERT = dict(vocab_size=VOCAB, hidden_size=32, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=160, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _blip() -> nn.Module:
    torch.manual_seed(0)
    return BlipTextEncoder(config={**BERT, "num_hidden_layers": 2}, embed_dim=16)


def _blip_extended() -> nn.Module:
    """BLIP's encoder stretched from 160 to 300 positions (Long-CLIP's stretching)."""
    enc = _blip()
    extend_text_context(enc, 300, keep=20)
    return enc


def _dual_cls() -> nn.Module:
    torch.manual_seed(0)
    enc = DualCLSTextEncoder(config={**BERT, "num_hidden_layers": 3}, embed_dim=16, num_fusion_layers=1,
                             cls_token_id=CLS)
    with torch.no_grad():  # the two views' CLS apart, as after some training
        enc.cls_embeddings[1] += torch.randn(32, generator=torch.Generator().manual_seed(1))
    return enc


ENCODERS = {"blip": _blip, "blip_extended": _blip_extended, "dual_cls": _dual_cls}


def _texts(lengths: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] words [SEP] of the given lengths, right-padded with 0 to the longest (the collate's layout)."""
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(5, VOCAB, (n,), generator=g)
        ids[row, 0], ids[row, n - 1] = CLS, SEP
        mask[row, :n] = 1
    return ids, mask


# captions of 6-14 tokens and paragraphs of 90-128, interleaved as a collate lays them out
MIXED = [9, 118, 6, 128, 14, 95, 11, 90, 7, 101, 12, 126, 8, 99]


def _loss_and_grads(encoder: nn.Module, encode, *, view_ids: torch.Tensor | None):
    """One loss backward through ``encode(fn, ids, mask, *rows)``: loss, embeddings, gradients."""
    ids, mask = _texts(MIXED)
    rows = () if view_ids is None else (view_ids,)
    owner = torch.arange(len(MIXED)) // 2
    image = torch.randn(len(MIXED) // 2, 16, generator=torch.Generator().manual_seed(4))
    encoder.zero_grad(set_to_none=True)
    emb = encode(encoder, ids, mask, *rows)
    loss = MultiPositiveInfoNCELoss()(image, emb, owner)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in encoder.named_parameters() if p.grad is not None}
    return loss.detach(), emb.detach(), grads


def _assert_same(got, expected):
    loss, emb, grads = got
    ref_loss, ref_emb, ref_grads = expected
    torch.testing.assert_close(emb, ref_emb, **TOL)
    torch.testing.assert_close(loss, ref_loss, **TOL)
    assert grads.keys() == ref_grads.keys() and len(grads) > 10
    for name in ref_grads:
        torch.testing.assert_close(grads[name], ref_grads[name], **TOL, msg=name)


def _one_block(encoder, ids, mask, *rows):
    return encoder(ids, mask, *rows)


@pytest.mark.parametrize("kind", sorted(ENCODERS))
@pytest.mark.parametrize("blocks", [2, 3])
def test_blocks_give_the_one_block_embeddings_and_gradients_in_order(kind, blocks):
    encoder = ENCODERS[kind]().train()  # dropout is 0: train mode changes nothing else
    view_ids = torch.tensor([0, 1] * (len(MIXED) // 2)) if kind == "dual_cls" else None
    expected = _loss_and_grads(encoder, _one_block, view_ids=view_ids)
    got = _loss_and_grads(
        encoder, lambda enc, *x: encode_in_length_blocks(enc, *x, blocks=blocks, parameters=enc),
        view_ids=view_ids)
    _assert_same(got, expected)


@pytest.mark.parametrize("kind", sorted(ENCODERS))
def test_each_row_alone_at_its_own_length_is_the_same_embedding(kind):
    """What makes cutting the padding exact: a row's embedding does not depend on the
    padding after it (positions are absolute from 0, padded keys are masked)."""
    encoder = ENCODERS[kind]().eval()
    ids, mask = _texts(MIXED)
    rows = (torch.tensor([1, 0] * (len(MIXED) // 2)),) if kind == "dual_cls" else ()
    with torch.no_grad():
        padded = encoder(ids, mask, *rows)
        for i, n in enumerate(MIXED):
            alone = encoder(ids[i : i + 1, :n], mask[i : i + 1, :n], *(r[i : i + 1] for r in rows))
            torch.testing.assert_close(alone[0], padded[i], **TOL)


@pytest.mark.parametrize("kind", sorted(ENCODERS))
@pytest.mark.parametrize("chunk", [3, 5])
def test_with_gradient_caching_too(kind, chunk):
    encoder = ENCODERS[kind]().train()
    view_ids = torch.tensor([1, 0] * (len(MIXED) // 2)) if kind == "dual_cls" else None
    expected = _loss_and_grads(encoder, _one_block, view_ids=view_ids)
    # the tensors the plain call reads: not the dual-CLS encoder's fusion layers, cross-attention
    # and MLM head, which only its video-text heads use (passing those is warned about)
    read = [p for n, p in encoder.named_parameters() if n in expected[2]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _loss_and_grads(
            encoder,
            lambda enc, *x: encode_in_length_blocks(enc, *x, blocks=2, chunk_size=chunk, parameters=read),
            view_ids=view_ids)
    _assert_same(got, expected)


def test_caching_replays_each_chunks_dropout():
    """Dropout on: the cached, length-sorted chunks give the gradients of the same chunks
    encoded with their graphs kept, under the same random draws."""
    torch.manual_seed(0)
    encoder = BlipTextEncoder(config={**BERT, "num_hidden_layers": 2, "hidden_dropout_prob": 0.1,
                                      "attention_probs_dropout_prob": 0.1}, embed_dim=16).train()
    chunk = 4
    ids, mask = _texts(MIXED)
    lengths = mask.sum(1)
    order = torch.argsort(lengths, stable=True)

    def kept_graphs(enc, ids, mask):
        """The reference: sorted rows, chunk by chunk, each cut to its longest, graph kept."""
        outs = []
        for part in order.split(chunk):
            width = int(lengths[part].max())
            outs.append(enc(ids[part, :width], mask[part, :width]))
        return torch.cat(outs)[torch.argsort(order)]

    def cached(enc, ids, mask):
        return encode_in_length_blocks(enc, ids, mask, blocks=2, chunk_size=chunk, parameters=enc)

    torch.manual_seed(7)
    got = _loss_and_grads(encoder, cached, view_ids=None)
    torch.manual_seed(7)
    expected = _loss_and_grads(encoder, kept_graphs, view_ids=None)
    _assert_same(got, expected)
    torch.manual_seed(8)
    other = _loss_and_grads(encoder, kept_graphs, view_ids=None)
    assert (other[0] - expected[0]).abs() > 1e-4  # dropout is really on


def _padded_tokens(lengths: list[int], groups: list[list[int]]) -> int:
    return sum(len(g) * max(lengths[i] for i in g) for g in groups)


def _cheapest_partition(lengths: list[int], blocks: int) -> int:
    """Brute force over every way of putting the rows into at most ``blocks`` groups (any
    rows together, not only neighbours in length order)."""
    best = None
    for labels in itertools.product(range(blocks), repeat=len(lengths)):
        groups = [[i for i, b in enumerate(labels) if b == k] for k in range(blocks)]
        cost = _padded_tokens(lengths, [g for g in groups if g])
        best = cost if best is None else min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_the_split_has_the_fewest_padded_tokens(seed):
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 8, (), generator=g))
    lengths = sorted(torch.randint(3, 40, (n,), generator=g).tolist())
    if seed % 3 == 0:  # repeated lengths
        lengths = sorted(lengths[: max(1, n // 2)] * 2)
    for blocks in (1, 2, 3):
        bounds = length_block_bounds(lengths, blocks)
        assert bounds[-1] == len(lengths) and bounds == sorted(set(bounds)) and len(bounds) <= blocks
        groups = [list(range(a, b)) for a, b in zip([0, *bounds[:-1]], bounds)]
        assert _padded_tokens(lengths, groups) == _cheapest_partition(lengths, blocks)


def test_one_length_is_one_block():
    assert length_block_bounds([77] * 9, 4) == [9]
    calls = []

    def encoder(ids, mask):
        calls.append(ids.shape)
        return ids.float()[:, :3]

    ids, mask = _texts([12] * 6)
    out = encode_in_length_blocks(encoder, ids, mask, blocks=3)
    assert calls == [(6, 12)] and torch.equal(out, ids.float()[:, :3])


def test_blocks_are_cut_to_their_own_longest_text():
    seen = []

    def encoder(ids, mask):
        seen.append((ids.shape[0], ids.shape[1], int(mask.sum(1).max())))
        return mask.sum(1, keepdim=True).float()

    ids, mask = _texts([9, 118, 6, 128, 14, 95])
    out = encode_in_length_blocks(encoder, ids, mask, blocks=2)
    assert seen == [(3, 14, 14), (3, 128, 128)]
    assert out[:, 0].tolist() == [9, 118, 6, 128, 14, 95]  # the batch's order


def test_left_padding_falls_back_to_one_block_with_a_warning(monkeypatch):
    monkeypatch.setattr(length_blocks_module, "_warned_padding", False)
    ids, mask = _texts([4, 9, 5])
    left = torch.stack([torch.roll(row, int((row == 0).sum())) for row in mask])
    calls = []

    def encoder(ids, mask):
        calls.append(ids.shape)
        return mask.float()

    with pytest.warns(UserWarning, match="not right-padded"):
        out = encode_in_length_blocks(encoder, ids, left, blocks=2)
    assert calls == [(3, 9)] and torch.equal(out, left.float())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process
        encode_in_length_blocks(encoder, ids, left, blocks=2)


@pytest.mark.parametrize("blocks", [0, -1, 1.5, "2", True, None])
def test_blocks_must_be_a_positive_integer(blocks):
    ids, mask = _texts([3, 4])
    with pytest.raises(ValueError, match=r"encode_in_length_blocks: blocks must be an integer >= 1"):
        encode_in_length_blocks(lambda i, m: m.float(), ids, mask, blocks=blocks)
    with pytest.raises(ValueError, match=r"length_block_bounds: blocks must be an integer >= 1"):
        length_block_bounds([3, 4], blocks)


def test_unsorted_lengths_are_refused():
    with pytest.raises(ValueError, match="non-decreasing"):
        length_block_bounds([5, 3], 2)


def test_docstring_examples_run():
    assert doctest.testmod(length_blocks_module, raise_on_error=True).attempted >= 3
