"""VTM: hard-negative draws (never the same video, softmax frequencies) and the matching
cross-entropy written out, on a tiny stand-in fusion model."""

from __future__ import annotations

import doctest
import importlib
import json
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from _video_text_model import TinyVideoTextModel, video_text_batch

from vlr_plugins.losses import VideoTextMatchingLoss, sample_hard_negatives, video_text_matching
from vlr_plugins.registry import LOSSES

DRAWS = 6000


def _chi2_critical(df: int, z: float = 3.29) -> float:
    """Upper ~5e-4 quantile of chi-square with ``df`` degrees of freedom (Wilson-Hilferty)."""
    c = 2 / (9 * df)
    return df * (1 - c + z * math.sqrt(c)) ** 3


def _chi2(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = counts.sum() * probs
    return float(((counts - expected) ** 2 / expected).sum())


def _draw_counts(sim, owner, hard):
    """How often each video / caption is drawn for each caption over DRAWS seeded draws."""
    g = torch.Generator().manual_seed(0)
    n, b = sim.shape
    videos, texts = torch.zeros(n, b), torch.zeros(n, n)
    rows = torch.arange(n)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # thousands of tiny draws: threads only add overhead
    try:
        for _ in range(DRAWS):
            v, t = sample_hard_negatives(sim, owner, hard=hard, generator=g)
            videos[rows, v] += 1
            texts[rows, t] += 1
    finally:
        torch.set_num_threads(threads)
    return videos, texts


# 5 captions of 4 videos; video 0 has two captions
OWNER = torch.tensor([0, 0, 1, 2, 3])


def _sim() -> torch.Tensor:
    return 2 * torch.randn(5, 4, generator=torch.Generator().manual_seed(3))


def test_negatives_are_never_the_captions_own_video():
    videos, texts = _draw_counts(_sim(), OWNER, hard=True)
    for j, o in enumerate(OWNER.tolist()):
        assert videos[j, o] == 0
        assert texts[j, OWNER == o].sum() == 0, "a caption of the same video was drawn"


def test_hard_negative_frequencies_follow_the_softmax():
    sim = _sim()
    videos, texts = _draw_counts(sim, OWNER, hard=True)
    far_from_uniform = 0
    for j, o in enumerate(OWNER.tolist()):
        other_videos = torch.arange(4) != o
        p_video = torch.softmax(sim[j, other_videos], dim=0)
        df = int(other_videos.sum()) - 1
        assert _chi2(videos[j, other_videos], p_video) < _chi2_critical(df)
        # the negative caption for caption j's video: softmax of that video's column
        other_texts = OWNER != o
        p_text = torch.softmax(sim[other_texts, o], dim=0)
        assert _chi2(texts[j, other_texts], p_text) < _chi2_critical(int(other_texts.sum()) - 1)
        uniform = torch.full_like(p_video, 1 / len(p_video))
        far_from_uniform += _chi2(videos[j, other_videos], uniform) > 10 * _chi2_critical(df)
    assert far_from_uniform >= 3, "the test must tell the softmax from a uniform draw"


def test_without_hard_negatives_the_draw_is_uniform():
    videos, texts = _draw_counts(_sim(), OWNER, hard=False)
    for j, o in enumerate(OWNER.tolist()):
        others = torch.arange(4) != o
        assert videos[j, o] == 0
        assert _chi2(videos[j, others], torch.full((3,), 1 / 3)) < _chi2_critical(2)
        other_texts = OWNER != o
        k = int(other_texts.sum())
        assert _chi2(texts[j, other_texts], torch.full((k,), 1 / k)) < _chi2_critical(k - 1)


def test_same_seed_same_draws():
    a = sample_hard_negatives(_sim(), OWNER, generator=torch.Generator().manual_seed(5))
    b = sample_hard_negatives(_sim(), OWNER, generator=torch.Generator().manual_seed(5))
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def _batch(seed=0):
    # 3 videos, 5 captions of different lengths; videos 0 and 2 have two captions each
    return video_text_batch(3, [4, 6, 3, 5, 6], [0, 1, 2, 0, 2], seed=seed)


def _vtm(model, batch, seed=7, **kwargs):
    return video_text_matching(
        model, batch["video_emb"], batch["text_emb"], batch["text_owner"], batch["video_tokens"],
        batch["text_hidden"], batch["attention_mask"], temperature=0.1,
        generator=torch.Generator().manual_seed(seed), **kwargs)


def test_loss_is_cross_entropy_written_out():
    model, batch = TinyVideoTextModel(), _batch()
    loss = _vtm(model, batch)

    owner = batch["text_owner"]
    sim = (F.normalize(batch["text_emb"], dim=-1) @ F.normalize(batch["video_emb"], dim=-1).T) / 0.1
    neg_video, neg_text = sample_hard_negatives(sim, owner, generator=torch.Generator().manual_seed(7))
    pairs = [(j, int(owner[j]), 1) for j in range(5)]
    pairs += [(j, int(neg_video[j]), 0) for j in range(5)]
    pairs += [(int(neg_text[j]), int(owner[j]), 0) for j in range(5)]
    total = 0.0
    for text, video, label in pairs:  # one pair at a time: no batching, no padding shared
        fused = model.fuse(batch["text_hidden"][[text]], batch["attention_mask"][[text]],
                           batch["video_tokens"][[video]], torch.ones(1, 5))
        z = model.match_logits(fused[:, 0])[0]
        total = total - (z[label] - torch.logsumexp(z, dim=0))
    torch.testing.assert_close(loss, total / len(pairs))


def test_gradients_reach_tokens_and_heads_not_the_embeddings():
    model, batch = TinyVideoTextModel(), _batch()
    for k in ("video_emb", "text_emb", "video_tokens", "text_hidden"):
        batch[k].requires_grad_()
    _vtm(model, batch).backward()
    for k in ("video_tokens", "text_hidden"):
        assert batch[k].grad is not None and batch[k].grad.abs().sum() > 0
    # the draws are not differentiable (ALBEF, UMT): VTC trains the embeddings
    assert batch["video_emb"].grad is None and batch["text_emb"].grad is None
    for name in ("match_head.weight", "mix.weight", "video_in.weight"):
        assert dict(model.named_parameters())[name].grad.abs().sum() > 0


def test_padding_and_video_mask_change_nothing_they_should_not():
    model, batch = TinyVideoTextModel(), _batch()
    padded = dict(batch)
    extra = torch.randn(5, 3, 8, dtype=torch.float64)
    padded["text_hidden"] = torch.cat([batch["text_hidden"], extra], dim=1)
    padded["attention_mask"] = F.pad(batch["attention_mask"], (0, 3))
    torch.testing.assert_close(_vtm(model, padded), _vtm(model, batch))
    # an explicit all-ones video mask is the default
    torch.testing.assert_close(_vtm(model, batch, video_mask=torch.ones(3, 5)), _vtm(model, batch))
    # a real mask is passed on
    masked = _vtm(model, batch, video_mask=torch.tensor([[1, 1, 0, 0, 0]] * 3))
    assert not torch.isclose(masked, _vtm(model, batch))


def test_gather_on_one_process_is_local():
    model, batch = TinyVideoTextModel(), _batch()
    torch.testing.assert_close(_vtm(model, batch, gather=True), _vtm(model, batch, gather=False))


def test_errors_name_the_problem():
    model, batch = TinyVideoTextModel(), _batch()
    one_video = video_text_batch(1, [4, 5], [0, 0], seed=1)
    with pytest.raises(ValueError, match=r"a caption needs another video.*VTM needs at least 2"):
        _vtm(model, one_video)
    with pytest.raises(TypeError, match=r"video_text_matching: the model must implement fuse, "
                                        r"match_logits .* SimpleNamespace lacks match_logits"):
        _vtm(SimpleNamespace(fuse=model.fuse), batch)
    bad = dict(batch, text_owner=torch.tensor([0, 1, 2, 0, 3]))
    with pytest.raises(ValueError, match=r"text_owner\[4\] = 3 is out of range: expected "
                                         r"0 <= owner < 3 \(the number of videos\)"):
        _vtm(model, bad)
    bad = dict(batch, attention_mask=batch["attention_mask"][:, :4])
    with pytest.raises(ValueError, match=r"text_mask must have shape \(5, 6\)"):
        _vtm(model, bad)


def test_module_is_the_functional_and_round_trips():
    model, batch = TinyVideoTextModel(), _batch()
    loss_fn = VideoTextMatchingLoss(hard_negatives=True, temperature=0.1)
    args = (model, batch["video_emb"], batch["text_emb"], batch["text_owner"],
            batch["video_tokens"], batch["text_hidden"], batch["attention_mask"])
    torch.testing.assert_close(loss_fn(*args, generator=torch.Generator().manual_seed(7)),
                               _vtm(model, batch))
    # a call-time temperature (VTC's) replaces the module's own
    at_02 = video_text_matching(*args, temperature=0.2, generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(loss_fn(*args, temperature=0.2,
                                       generator=torch.Generator().manual_seed(7)), at_02)
    config = loss_fn.get_config_dict()
    json.dumps(config)
    assert VideoTextMatchingLoss(**config).get_config_dict() == config
    assert isinstance(LOSSES.build({"type": "VideoTextMatchingLoss", **config}), VideoTextMatchingLoss)
    assert list(loss_fn.parameters()) == [], "the matching head is the model's"


def test_docstring_examples_run():
    result = doctest.testmod(importlib.import_module("vlr_plugins.losses.vtm"))
    assert result.attempted > 0 and result.failed == 0
