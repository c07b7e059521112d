"""The combined VTC + VTM + MLM objective: each term is its own loss, per view, averaged;
weights, view subsets, gradients, config."""

from __future__ import annotations

import doctest
import importlib
import json
from types import SimpleNamespace

import pytest
import torch
from _video_text_model import TinyVideoTextModel, video_text_batch

from vlr_plugins.losses import (
    VideoTextPretrainingLoss,
    masked_language_modeling,
    video_text_contrastive,
    video_text_matching,
)
from vlr_plugins.registry import LOSSES

SPECIAL, MASK, VOCAB = [0, 1, 2], 3, 40


def _batch(seed=0):
    """3 videos; summary captions (short) and detailed captions (long), interleaved."""
    batch = video_text_batch(3, [4, 12, 5, 10, 3, 11], [0, 0, 1, 1, 2, 2], seed=seed)
    batch["text_view"] = torch.tensor([0, 1, 0, 1, 0, 1])
    return batch


def _loss_fn(**kwargs):
    return VideoTextPretrainingLoss(vocab_size=VOCAB, mask_id=MASK, special_ids=SPECIAL,
                                    learnable_temperature=False, **kwargs)


def _call(loss_fn, model, batch, seed=11, **kwargs):
    return loss_fn(model, batch["video_emb"], batch["text_emb"], batch["text_owner"],
                   batch["text_view"], video_tokens=batch["video_tokens"],
                   text_hidden=batch["text_hidden"], input_ids=batch["input_ids"],
                   attention_mask=batch["attention_mask"],
                   generator=torch.Generator().manual_seed(seed), **kwargs)


def _terms_one_by_one(model, batch, seed=11, temperature=0.07, views=(0, 1)):
    """Each term from its own function, view by view, drawing from one generator in the
    order the combined loss draws (per view: VTM, then MLM), each view's captions cut to
    the longest of them (MLM draws one number per position, so the cut shows in the draws)."""
    g = torch.Generator().manual_seed(seed)
    terms = {"vtc": [], "vtm": [], "mlm": []}
    for v in views:
        rows = (batch["text_view"] == v).nonzero().flatten()
        owner = batch["text_owner"][rows]
        longest = int(batch["attention_mask"][rows].sum(1).max())  # right padding
        ids, mask = batch["input_ids"][rows, :longest], batch["attention_mask"][rows, :longest]
        terms["vtc"].append(video_text_contrastive(batch["video_emb"], batch["text_emb"][rows],
                                                   owner, temperature=temperature))
        terms["vtm"].append(video_text_matching(
            model, batch["video_emb"], batch["text_emb"][rows], owner, batch["video_tokens"],
            batch["text_hidden"][rows, :longest], mask, temperature=temperature, generator=g))
        terms["mlm"].append(masked_language_modeling(
            model, ids, mask, batch["video_tokens"], owner, special_ids=SPECIAL, mask_id=MASK,
            vocab_size=VOCAB, view_ids=batch["text_view"][rows], generator=g))
    return terms


def test_each_term_is_its_loss_averaged_over_the_views():
    model, batch = TinyVideoTextModel(vocab_size=VOCAB), _batch()
    out = _call(_loss_fn(), model, batch)
    expected = _terms_one_by_one(model, batch)
    for term, values in expected.items():
        torch.testing.assert_close(out[term], torch.stack(values).mean())
        for name, value in zip(("summary", "detailed"), values):
            torch.testing.assert_close(out[f"{term}_{name}"], value.detach())
            assert not out[f"{term}_{name}"].requires_grad, "per-view values are for logging"
    torch.testing.assert_close(out["loss"], out["vtc"] + out["vtm"] + out["mlm"])
    assert [k for k in out if "loss" in k] == ["loss"], "MMEngine sums every key named *loss*"


def test_weights_and_view_subsets():
    model, batch = TinyVideoTextModel(vocab_size=VOCAB), _batch()
    out = _call(_loss_fn(vtc_weight=2.0, vtm_weight=0.5, mlm_weight=0.0,
                         matching_views=("summary",)), model, batch)
    g = torch.Generator().manual_seed(11)
    rows = (batch["text_view"] == 0).nonzero().flatten()
    vtm = video_text_matching(
        model, batch["video_emb"], batch["text_emb"][rows], batch["text_owner"][rows],
        batch["video_tokens"], batch["text_hidden"][rows], batch["attention_mask"][rows],
        temperature=0.07, generator=g)
    torch.testing.assert_close(out["vtm"], vtm)
    assert "vtm_detailed" not in out and "mlm_summary" not in out
    assert out["mlm"].item() == 0
    torch.testing.assert_close(out["loss"], 2 * out["vtc"] + 0.5 * vtm)


def test_a_term_of_weight_zero_needs_nothing_of_the_model():
    batch = _batch()
    vtc_only = SimpleNamespace()  # no fusion layers at all
    out = _call(_loss_fn(vtm_weight=0, mlm_weight=0), vtc_only, batch)
    torch.testing.assert_close(out["loss"], out["vtc"])
    with pytest.raises(TypeError, match=r"VideoTextPretrainingLoss: the model must implement "
                                        r"fuse, match_logits .* lacks fuse, match_logits"):
        _call(_loss_fn(mlm_weight=0), vtc_only, batch)


def test_gradients_reach_embeddings_tokens_heads_and_temperature():
    model, batch = TinyVideoTextModel(vocab_size=VOCAB), _batch()
    for k in ("video_emb", "text_emb", "video_tokens", "text_hidden"):
        batch[k].requires_grad_()
    loss_fn = VideoTextPretrainingLoss(vocab_size=VOCAB, mask_id=MASK, special_ids=SPECIAL)
    _call(loss_fn, model, batch)["loss"].backward()
    for k in ("video_emb", "text_emb", "video_tokens", "text_hidden"):
        assert batch[k].grad is not None and batch[k].grad.abs().sum() > 0, k
    params = dict(model.named_parameters())
    for name in ("match_head.weight", "mlm_bias", "words.weight", "view_cls.weight", "mix.weight"):
        assert params[name].grad is not None and params[name].grad.abs().sum() > 0, name
    assert loss_fn.temperature.grad is not None and loss_fn.temperature.grad != 0


def test_the_vtc_temperature_drives_the_negatives():
    model, batch = TinyVideoTextModel(vocab_size=VOCAB), _batch()
    out = _call(_loss_fn(), model, batch, temperature=0.3)
    expected = _terms_one_by_one(model, batch, temperature=0.3)
    torch.testing.assert_close(out["vtm"], torch.stack(expected["vtm"]).mean())
    torch.testing.assert_close(out["vtc"], torch.stack(expected["vtc"]).mean())


def test_every_video_needs_a_caption_of_every_view():
    model, batch = TinyVideoTextModel(vocab_size=VOCAB), _batch()
    batch["text_view"] = torch.tensor([0, 1, 0, 0, 0, 1])
    with pytest.raises(ValueError, match=r"VideoTextPretrainingLoss: every video needs at least "
                                         r"one caption of each view; videos \[1\] have no "
                                         r"'detailed' caption"):
        _call(_loss_fn(), model, batch)


@pytest.mark.parametrize("kwargs, message", [
    (dict(matching_views=("short",)), (r"matching_views must be a non-empty subset of views "
                                       r"\('summary', 'detailed'\); found \('short',\)")),
    (dict(vtm_weight=-1.0), r"vtm_weight must be >= 0"),
    (dict(mlm_ratio=1.5), r"mlm_ratio must be in \(0, 1\]"),
])
def test_constructor_errors(kwargs, message):
    with pytest.raises(ValueError, match=rf"VideoTextPretrainingLoss: {message}"):
        _loss_fn(**kwargs)


def test_config_round_trip_registration_and_tokenizer(tiny_world):
    tokenizer = tiny_world["object"].tokenizer()
    loss_fn = VideoTextPretrainingLoss.from_tokenizer(tokenizer, mlm_views=("detailed",),
                                                      gather=False)
    assert loss_fn.mask_id == tokenizer.mask_token_id and loss_fn.vocab_size == len(tokenizer)
    config = loss_fn.get_config_dict()
    json.dumps(config)
    assert VideoTextPretrainingLoss(**config).get_config_dict() == config
    assert config["mlm_views"] == ["detailed"] and config["matching_views"] == ["summary", "detailed"]
    assert config["temperature"] == pytest.approx(0.07) and config["learnable_temperature"]
    built = LOSSES.build({"type": "VideoTextPretrainingLoss", **config})
    assert isinstance(built, VideoTextPretrainingLoss)
    assert [name for name, _ in built.named_parameters()] == ["temperature"]


def test_docstring_examples_run():
    result = doctest.testmod(importlib.import_module("vlr_plugins.losses.video_text_pretraining"))
    assert result.attempted > 0 and result.failed == 0
