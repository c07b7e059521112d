"""VTC: symmetric InfoNCE per caption view, averaged, against the formula written out."""

from __future__ import annotations

import doctest
import importlib
import json

import pytest
import torch
import torch.nn.functional as F

from vlr_plugins.losses import VideoTextContrastiveLoss, video_text_contrastive
from vlr_plugins.registry import LOSSES


def _emb(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _infonce_written_out(video, text, owner, temperature):
    """Video->text: minus the mean log-probability of the video's captions; text->video:
    minus the log-probability of the caption's video; the two averaged."""
    video, text = F.normalize(video, dim=-1), F.normalize(text, dim=-1)
    s = video @ text.T / temperature  # (B, N)
    v2t, t2v = 0.0, 0.0
    for i in range(s.shape[0]):
        mine = (owner == i).nonzero().flatten()
        log_p = s[i] - torch.logsumexp(s[i], dim=0)
        v2t = v2t - log_p[mine].mean()
    for j in range(s.shape[1]):
        t2v = t2v - (s[owner[j], j] - torch.logsumexp(s[:, j], dim=0))
    return (v2t / s.shape[0] + t2v / s.shape[1]) / 2


def test_each_view_is_infonce_and_the_views_are_averaged():
    video, text = _emb(4, 6, seed=1), _emb(9, 6, seed=2)
    # summary: one caption per video; detailed: video 2 has two
    owner = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3, 2])
    view = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 1])
    expected = (_infonce_written_out(video, text[:4], owner[:4], 0.07)
                + _infonce_written_out(video, text[4:], owner[4:], 0.07)) / 2
    torch.testing.assert_close(video_text_contrastive(video, text, owner, view), expected)
    loss_fn = VideoTextContrastiveLoss(learnable_temperature=False)
    torch.testing.assert_close(loss_fn(video, text, owner, view), expected)


def test_caption_order_does_not_matter():
    video, text = _emb(3, 5, seed=3), _emb(6, 5, seed=4)
    owner, view = torch.tensor([0, 1, 2, 0, 1, 2]), torch.tensor([0, 0, 0, 1, 1, 1])
    perm = torch.tensor([4, 0, 5, 2, 1, 3])
    torch.testing.assert_close(video_text_contrastive(video, text, owner, view, temperature=0.1),
                               video_text_contrastive(video, text[perm], owner[perm], view[perm],
                                                      temperature=0.1))


def test_one_view_without_text_view():
    video, text = _emb(3, 5, seed=5), _emb(3, 5, seed=6)
    owner = torch.tensor([2, 0, 1])
    torch.testing.assert_close(video_text_contrastive(video, text, owner, temperature=0.2),
                               _infonce_written_out(video, text, owner, 0.2))
    loss_fn = VideoTextContrastiveLoss(views=("caption",), learnable_temperature=False)
    torch.testing.assert_close(loss_fn(video, text, owner, temperature=0.2),
                               _infonce_written_out(video, text, owner, 0.2))


@pytest.mark.parametrize("owner, view, message", [
    ([0, 1, 0], [0, 0, 1], r"videos \[1\] have no 'detailed' caption"),
    ([0, 1, 0, 1], [0, 0, 1, 2], r"text_view\[3\] = 2 is out of range: expected 0 <= view < 2"),
    ([0, 1], [0.0, 1.0], r"text_view must hold integer view indices"),
])
def test_view_errors_name_the_problem(owner, view, message):
    loss_fn = VideoTextContrastiveLoss()
    with pytest.raises(ValueError, match=rf"video_text_contrastive: .*{message}"):
        loss_fn(_emb(2, 4, seed=1), _emb(len(owner), 4, seed=2), torch.tensor(owner),
                torch.tensor(view))


def test_two_views_need_text_view():
    with pytest.raises(ValueError, match=r"text_view=None means one caption view; found views "
                                         r"\('summary', 'detailed'\)"):
        VideoTextContrastiveLoss()(_emb(2, 4, seed=1), _emb(2, 4, seed=2), torch.tensor([0, 1]))


def test_temperature_is_learnable_and_clamped_by_default():
    loss_fn = VideoTextContrastiveLoss()
    assert isinstance(loss_fn.temperature, torch.nn.Parameter)
    assert loss_fn.temperature.item() == pytest.approx(0.07)
    with torch.no_grad():
        loss_fn.temperature.fill_(0.9)
    video, text = _emb(2, 4, seed=7), _emb(4, 4, seed=8)
    owner, view = torch.tensor([0, 1, 0, 1]), torch.tensor([0, 0, 1, 1])
    loss = loss_fn(video, text, owner, view)
    assert loss_fn.temperature.item() == pytest.approx(0.5)
    loss.backward()
    assert loss_fn.temperature.grad is not None and loss_fn.temperature.grad != 0
    # a call-time temperature replaces the module's own
    torch.testing.assert_close(loss_fn(video, text, owner, view, temperature=0.3),
                               video_text_contrastive(video, text, owner, view, temperature=0.3))


def test_config_round_trip_and_registration():
    loss_fn = VideoTextContrastiveLoss(views=("short", "long"), temperature=0.05, gather=False)
    config = loss_fn.get_config_dict()
    json.dumps(config)
    assert VideoTextContrastiveLoss(**config).get_config_dict() == config
    assert config["views"] == ["short", "long"]
    built = LOSSES.build({"type": "VideoTextContrastiveLoss", **config})
    assert isinstance(built, VideoTextContrastiveLoss) and built.views == ("short", "long")
    with pytest.raises(ValueError, match=r"views must be distinct non-empty names"):
        VideoTextContrastiveLoss(views=("a", "a"))


def test_docstring_examples_run():
    result = doctest.testmod(importlib.import_module("vlr_plugins.losses.vtc"))
    assert result.attempted > 0 and result.failed == 0
