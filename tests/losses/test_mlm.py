"""MLM: BERT's 80/10/10 corruption at MVC's ratio 0.5, special and padding tokens untouched,
and the loss against cross-entropy written out on a tiny stand-in model."""

from __future__ import annotations

import doctest
import importlib
import json
import math
from types import SimpleNamespace

import pytest
import torch
from _video_text_model import TinyVideoTextModel, video_text_batch

from vlr_plugins.losses import MaskedLanguageModelingLoss, mask_tokens, masked_language_modeling
from vlr_plugins.registry import LOSSES

VOCAB, MASK, SPECIAL = 1000, 3, [0, 1, 2, 3, 4]  # [PAD], [CLS], [SEP], [MASK], [UNK]


def _captions(rows=400, longest=64, seed=0):
    """[CLS] words [SEP] then padding, of random lengths; words drawn from the non-special ids."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, longest + 1, (rows,), generator=g)
    ids = torch.randint(5, VOCAB, (rows, longest), generator=g)
    position = torch.arange(longest)
    ids[:, 0] = 1
    ids[position == (lengths - 1).unsqueeze(1)] = 2
    ids[position >= lengths.unsqueeze(1)] = 0
    return ids, (ids != 0).long()


def _within(observed: int, n: int, p: float, sds: float = 5.0) -> bool:
    return abs(observed - n * p) <= sds * math.sqrt(n * p * (1 - p))


def test_masking_proportions():
    ids, mask = _captions()
    masked, labels = mask_tokens(ids, mask, SPECIAL, MASK, VOCAB, ratio=0.5,
                                 generator=torch.Generator().manual_seed(1))
    maskable = mask.bool() & (ids > 4)
    chosen = labels != -100
    n = int(maskable.sum())
    assert n > 10_000
    assert _within(int(chosen.sum()), n, 0.5)
    k = int(chosen.sum())
    became_mask = chosen & (masked == MASK)
    became_other = chosen & (masked != MASK) & (masked != ids)
    kept = chosen & (masked == ids)
    assert _within(int(became_mask.sum()), k, 0.8)
    # a random replacement equals the original token with probability 1 / VOCAB
    assert _within(int(became_other.sum()), k, 0.1 * (1 - 1 / VOCAB))
    assert _within(int(kept.sum()), k, 0.1 + 0.1 / VOCAB)
    assert int(masked[became_other].max()) < VOCAB


def test_special_and_padding_tokens_are_never_touched():
    ids, mask = _captions(rows=200)
    masked, labels = mask_tokens(ids, mask, SPECIAL, MASK, VOCAB, ratio=1.0,
                                 generator=torch.Generator().manual_seed(2))
    protected = ~mask.bool() | (ids <= 4)
    assert torch.equal(masked[protected], ids[protected])
    assert bool((labels[protected] == -100).all())
    # ratio 1: every other token is chosen, and its label is the original id
    assert torch.equal(labels[~protected], ids[~protected])
    unchosen = labels == -100
    assert torch.equal(masked[unchosen], ids[unchosen])


def test_a_padded_position_is_protected_even_with_a_word_id():
    ids = torch.tensor([[1, 7, 8, 2, 9, 9]])  # left-over ids behind the attention mask
    mask = torch.tensor([[1, 1, 1, 1, 0, 0]])
    masked, labels = mask_tokens(ids, mask, SPECIAL, MASK, VOCAB, ratio=1.0)
    assert labels.tolist() == [[-100, 7, 8, -100, -100, -100]]
    assert masked[0, 4:].tolist() == [9, 9]


def test_the_generator_makes_masking_reproducible():
    ids, mask = _captions(rows=20)
    a = mask_tokens(ids, mask, SPECIAL, MASK, VOCAB, generator=torch.Generator().manual_seed(3))
    b = mask_tokens(ids, mask, SPECIAL, MASK, VOCAB, generator=torch.Generator().manual_seed(3))
    c = mask_tokens(ids, mask, SPECIAL, MASK, VOCAB, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])


@pytest.mark.parametrize("kwargs, message", [
    (dict(ratio=0.0), r"ratio must be in \(0, 1\]; found 0.0"),
    (dict(mask_id=1000), r"expected 0 <= mask_id < vocab_size = 1000, found 1000"),
])
def test_mask_tokens_errors(kwargs, message):
    ids, mask = _captions(rows=2)
    arguments = {"special_ids": SPECIAL, "mask_id": MASK, "vocab_size": VOCAB, **kwargs}
    with pytest.raises(ValueError, match=rf"mask_tokens: .*{message}"):
        mask_tokens(ids, mask, **arguments)


def _mlm_batch():
    # 3 videos, 4 captions; lengths include [CLS] and [SEP]; vocabulary of 40
    return video_text_batch(3, [7, 5, 9, 6], [0, 1, 2, 1], seed=5)


def test_loss_is_cross_entropy_written_out():
    model, batch = TinyVideoTextModel(), _mlm_batch()
    view_ids = torch.tensor([0, 0, 1, 1])
    special = [0, 1, 2]
    loss = masked_language_modeling(
        model, batch["input_ids"], batch["attention_mask"], batch["video_tokens"],
        batch["text_owner"], special_ids=special, mask_id=3, vocab_size=40, view_ids=view_ids,
        generator=torch.Generator().manual_seed(9))

    masked, labels = mask_tokens(batch["input_ids"], batch["attention_mask"], special, 3, 40,
                                 generator=torch.Generator().manual_seed(9))
    terms = []
    for row in range(4):  # one caption at a time, every position's logits, then the masked ones
        ids, mask = masked[[row]], batch["attention_mask"][[row]]
        video = batch["video_tokens"][batch["text_owner"][[row]]]
        hidden = model.encode_text_tokens(ids, mask, view_ids[[row]])
        logits = model.mlm_logits(model.fuse(hidden, mask, video, torch.ones(1, 5)))[0]
        for p in (labels[row] != -100).nonzero().flatten().tolist():
            terms.append(-(logits[p, labels[row, p]] - torch.logsumexp(logits[p], dim=0)))
    assert len(terms) > 3
    torch.testing.assert_close(loss, torch.stack(terms).mean())


def test_gradients_reach_the_video_tokens_and_the_heads():
    model, batch = TinyVideoTextModel(), _mlm_batch()
    video = batch["video_tokens"].requires_grad_()
    masked_language_modeling(model, batch["input_ids"], batch["attention_mask"], video,
                             batch["text_owner"], special_ids=[0, 1, 2], mask_id=3, vocab_size=40,
                             generator=torch.Generator().manual_seed(0)).backward()
    assert video.grad.abs().sum() > 0
    for name in ("words.weight", "mlm_bias", "mix.weight", "video_in.weight"):
        assert dict(model.named_parameters())[name].grad.abs().sum() > 0


def test_nothing_to_predict_gives_zero_with_every_head_in_the_graph():
    model, batch = TinyVideoTextModel(), _mlm_batch()
    only_special = torch.where(batch["attention_mask"].bool(), 1, 0)  # [CLS] everywhere
    loss = masked_language_modeling(model, only_special, batch["attention_mask"],
                                    batch["video_tokens"], batch["text_owner"],
                                    special_ids=[0, 1, 2], mask_id=3, vocab_size=40)
    assert loss.item() == 0
    loss.backward()
    assert torch.equal(model.mlm_bias.grad, torch.zeros_like(model.mlm_bias))


def test_a_model_without_the_methods_is_named():
    batch = _mlm_batch()
    with pytest.raises(TypeError, match=r"masked_language_modeling: the model must implement "
                                        r"encode_text_tokens, fuse, mlm_logits .* lacks "
                                        r"encode_text_tokens, mlm_logits"):
        masked_language_modeling(SimpleNamespace(fuse=lambda *a: a),
                                 batch["input_ids"], batch["attention_mask"],
                                 batch["video_tokens"], batch["text_owner"],
                                 special_ids=[0], mask_id=3, vocab_size=40)


def test_module_from_a_real_tokenizer(tiny_world):
    tokenizer = tiny_world["object"].tokenizer()
    loss_fn = MaskedLanguageModelingLoss.from_tokenizer(tokenizer)
    assert loss_fn.vocab_size == len(tokenizer) and loss_fn.mask_id == tokenizer.mask_token_id
    assert set(loss_fn.special_ids) == set(tokenizer.all_special_ids)
    batch = tokenizer(["a red cube on the left", "a ball"], padding=True, return_tensors="pt")
    masked, labels = mask_tokens(batch["input_ids"], batch["attention_mask"], loss_fn.special_ids,
                                 loss_fn.mask_id, loss_fn.vocab_size, ratio=1.0)
    specials = torch.isin(batch["input_ids"], torch.tensor(tokenizer.all_special_ids))
    assert bool((labels[specials] == -100).all()) and bool((labels[~specials] != -100).all())
    assert torch.equal(masked[specials], batch["input_ids"][specials])
    config = loss_fn.get_config_dict()
    json.dumps(config)
    assert MaskedLanguageModelingLoss(**config).get_config_dict() == config
    built = LOSSES.build({"type": "MaskedLanguageModelingLoss", **config})
    assert isinstance(built, MaskedLanguageModelingLoss) and built.ratio == 0.5


def test_module_is_the_functional():
    model, batch = TinyVideoTextModel(), _mlm_batch()
    loss_fn = MaskedLanguageModelingLoss(vocab_size=40, mask_id=3, special_ids=[0, 1, 2], ratio=0.3)
    args = (model, batch["input_ids"], batch["attention_mask"], batch["video_tokens"],
            batch["text_owner"])
    torch.testing.assert_close(
        loss_fn(*args, generator=torch.Generator().manual_seed(2)),
        masked_language_modeling(*args, special_ids=[0, 1, 2], mask_id=3, vocab_size=40, ratio=0.3,
                                 generator=torch.Generator().manual_seed(2)))


def test_docstring_examples_run():
    result = doctest.testmod(importlib.import_module("vlr_plugins.losses.mlm"))
    assert result.attempted > 0 and result.failed == 0
