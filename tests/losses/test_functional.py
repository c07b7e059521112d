"""multi_positive_infonce against independent transcriptions of its formula."""

from __future__ import annotations

import doctest
import importlib
import math

import pytest
import torch
import torch.nn.functional as F

from vlr_plugins.losses import multi_positive_infonce


def _unit(row: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in row))
    return [x / norm for x in row]


def _dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


def reference_loss(
    image, text, owner, temperature, neg=None, neg_owner=None, variant="mean_log", scope="batch",
    eps=0.0,
) -> float:
    """The docstring formula, one image / one caption at a time, in python floats; ``eps``
    (label smoothing) mixes each term with the mean of ``-log p`` over the candidates."""
    t = float(temperature)
    images = [_unit(r) for r in image.tolist()]
    texts = [_unit(r) for r in text.tolist()]
    negs = [_unit(r) for r in neg.tolist()] if neg is not None else []
    owner = [int(o) for o in owner]
    neg_owner = [int(o) for o in neg_owner] if neg_owner is not None else None

    i2t = []
    for i, v in enumerate(images):
        seen = [_dot(v, w) / t for w in texts]
        seen += [
            _dot(v, w) / t for m, w in enumerate(negs) if scope == "batch" or neg_owner[m] == i
        ]
        log_z = math.log(sum(math.exp(s) for s in seen))
        positives = [_dot(v, w) / t for j, w in enumerate(texts) if owner[j] == i]
        if variant == "mean_log":
            term = sum(log_z - s for s in positives) / len(positives)
        else:
            term = log_z - math.log(sum(math.exp(s) for s in positives))
        uniform = sum(log_z - s for s in seen) / len(seen)
        i2t.append((1 - eps) * term + eps * uniform)

    t2i = []
    for j, w in enumerate(texts):
        scores = [_dot(w, v) / t for v in images]
        log_z = math.log(sum(math.exp(s) for s in scores))
        uniform = sum(log_z - s for s in scores) / len(scores)
        t2i.append((1 - eps) * (log_z - scores[owner[j]]) + eps * uniform)

    return (sum(i2t) / len(i2t) + sum(t2i) / len(t2i)) / 2


def _batch(owner: list[int], num_images: int, num_neg: int = 0, dim: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    image = torch.randn(num_images, dim, generator=g, dtype=torch.float64)
    text = torch.randn(len(owner), dim, generator=g, dtype=torch.float64)
    neg = torch.randn(num_neg, dim, generator=g, dtype=torch.float64) if num_neg else None
    return image, text, torch.tensor(owner), neg


OWNERS = {
    "one_per_image": ([0, 1, 2, 3], 4),
    "k_varies": ([0, 0, 1, 2, 2, 2], 3),
    "unordered": ([2, 0, 1, 2, 0, 2], 3),
    "single_image_one_text": ([0], 1),
    "single_image_three_texts": ([0, 0, 0], 1),
}


@pytest.mark.parametrize("variant", ["mean_log", "log_sum"])
@pytest.mark.parametrize("case", sorted(OWNERS))
@pytest.mark.parametrize("as_tensor", [False, True], ids=["float_temp", "tensor_temp"])
def test_matches_reference_without_negatives(variant, case, as_tensor):
    owner, num_images = OWNERS[case]
    image, text, text_owner, _ = _batch(owner, num_images)
    temperature = torch.tensor(0.07, dtype=torch.float64) if as_tensor else 0.07
    loss = multi_positive_infonce(image, text, text_owner, temperature=temperature, variant=variant)
    assert loss.item() == pytest.approx(reference_loss(image, text, owner, 0.07, variant=variant),
                                        rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("variant", ["mean_log", "log_sum"])
@pytest.mark.parametrize("scope", ["batch", "own"])
@pytest.mark.parametrize("case", ["k_varies", "single_image_three_texts", "one_per_image"])
def test_matches_reference_with_hard_negatives(variant, scope, case):
    owner, num_images = OWNERS[case]
    image, text, text_owner, neg = _batch(owner, num_images, num_neg=5, seed=1)
    # image 1 (where it exists) gets no negative of its own: "own" must still work
    neg_owner = torch.tensor([0, 0, 2, 2, 0]) if num_images == 3 else torch.zeros(5, dtype=int)
    neg_owner = neg_owner.clamp(max=num_images - 1)
    loss = multi_positive_infonce(image, text, text_owner, temperature=0.2, neg_emb=neg,
                                  neg_owner=neg_owner, variant=variant, hard_negative_scope=scope)
    expected = reference_loss(image, text, owner, 0.2, neg, neg_owner, variant, scope)
    assert loss.item() == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0])
def test_label_smoothing_with_one_caption_per_image_is_torchs(eps):
    image, text, owner, _ = _batch([0, 1, 2, 3, 4], 5, seed=7)
    logits = F.normalize(image, dim=-1) @ F.normalize(text, dim=-1).T / 0.07
    torch_loss = (F.cross_entropy(logits, owner, label_smoothing=eps)
                  + F.cross_entropy(logits.T, owner, label_smoothing=eps)) / 2
    for variant in ("mean_log", "log_sum"):
        ours = multi_positive_infonce(image, text, owner, temperature=0.07, variant=variant,
                                      label_smoothing=eps)
        torch.testing.assert_close(ours, torch_loss)


@pytest.mark.parametrize("variant", ["mean_log", "log_sum"])
@pytest.mark.parametrize("case", ["k_varies", "unordered", "single_image_three_texts"])
def test_label_smoothing_with_several_captions_matches_reference(variant, case):
    owner, num_images = OWNERS[case]
    image, text, text_owner, _ = _batch(owner, num_images, seed=8)
    loss = multi_positive_infonce(image, text, text_owner, temperature=0.1, variant=variant,
                                  label_smoothing=0.1)
    expected = reference_loss(image, text, owner, 0.1, variant=variant, eps=0.1)
    assert loss.item() == pytest.approx(expected, rel=1e-10)
    if num_images > 1:  # one image: its captions are all its candidates, nothing to smooth
        assert loss.item() != pytest.approx(reference_loss(image, text, owner, 0.1, variant=variant))


@pytest.mark.parametrize("variant", ["mean_log", "log_sum"])
@pytest.mark.parametrize("scope", ["batch", "own"])
def test_label_smoothing_with_hard_negatives_matches_reference(variant, scope):
    """The smoothing share reaches the negatives an image sees, not those hidden from it."""
    image, text, text_owner, neg = _batch([0, 0, 1, 2, 2, 2], 3, num_neg=5, seed=9)
    neg_owner = torch.tensor([0, 0, 2, 2, 0])
    loss = multi_positive_infonce(image, text, text_owner, temperature=0.2, neg_emb=neg,
                                  neg_owner=neg_owner, variant=variant, hard_negative_scope=scope,
                                  label_smoothing=0.2)
    expected = reference_loss(image, text, text_owner, 0.2, neg, neg_owner, variant, scope, eps=0.2)
    assert loss.item() == pytest.approx(expected, rel=1e-10)


def test_mean_log_label_smoothing_is_cross_entropy_with_smoothed_soft_targets():
    """Several captions: the target of image i is (1 - eps) / |P(i)| on its captions plus
    eps / N on every caption; captions to images are torch's smoothed cross-entropy."""
    image, text, owner, _ = _batch([0, 0, 1, 2, 2, 2], 3, seed=10)
    eps, temp = 0.3, 0.1
    logits = F.normalize(image, dim=-1) @ F.normalize(text, dim=-1).T / temp
    positive = (owner.unsqueeze(0) == torch.arange(3).unsqueeze(1)).double()
    target = (1 - eps) * positive / positive.sum(1, keepdim=True) + eps / text.shape[0]
    i2t = -(target * F.log_softmax(logits, dim=1)).sum(1).mean()
    t2i = F.cross_entropy(logits.T, owner, label_smoothing=eps)
    ours = multi_positive_infonce(image, text, owner, temperature=temp, label_smoothing=eps)
    torch.testing.assert_close(ours, (i2t + t2i) / 2)


def test_negatives_raise_the_loss_and_own_scope_sees_fewer():
    image, text, owner, neg = _batch([0, 0, 1, 2], 3, num_neg=6, seed=2)
    neg_owner = torch.tensor([0, 0, 1, 1, 2, 2])
    plain = multi_positive_infonce(image, text, owner)
    own = multi_positive_infonce(image, text, owner, neg_emb=neg, neg_owner=neg_owner,
                                 hard_negative_scope="own")
    batch = multi_positive_infonce(image, text, owner, neg_emb=neg, neg_owner=neg_owner)
    assert plain < own < batch


@pytest.mark.parametrize("variant", ["mean_log", "log_sum"])
def test_duplicate_texts(variant):
    image, text, _, _ = _batch([0, 1, 2, 0, 1], 3, seed=3)
    text[3] = text[0]  # the same caption twice for image 0
    text[4] = text[2]  # the same caption for image 1 and image 2
    owner = [0, 1, 2, 0, 1]
    loss = multi_positive_infonce(image, text, torch.tensor(owner), variant=variant)
    assert loss.item() == pytest.approx(reference_loss(image, text, owner, 0.07, variant=variant),
                                        rel=1e-10)


def test_variants_agree_with_one_text_per_image_and_differ_otherwise():
    image, text, owner, _ = _batch([0, 1, 2], 3, seed=4)
    a = multi_positive_infonce(image, text, owner, variant="mean_log")
    b = multi_positive_infonce(image, text, owner, variant="log_sum")
    torch.testing.assert_close(a, b)
    image, text, owner, _ = _batch([0, 0, 1, 2], 3, seed=4)
    # -log(mean p) <= mean(-log p) (Jensen), and log_sum = -log(sum p) < -log(mean p)
    assert multi_positive_infonce(image, text, owner, variant="log_sum") < multi_positive_infonce(
        image, text, owner, variant="mean_log")


def test_mean_log_equals_blip_soft_targets():
    image, text, owner, _ = _batch([0, 0, 1, 2, 2, 2, 3], 4, seed=5)
    temp = 0.05
    # BLIP / LAVIS retrieval: soft targets spread evenly over each query's positives
    image_feat, text_feat = F.normalize(image, dim=-1), F.normalize(text, dim=-1)
    sim_i2t = image_feat @ text_feat.t() / temp
    sim_t2i = text_feat @ image_feat.t() / temp
    pos_mask = (owner.view(1, -1) == torch.arange(4).view(-1, 1)).double()
    sim_targets = pos_mask / pos_mask.sum(1, keepdim=True)
    loss_i2t = -torch.sum(F.log_softmax(sim_i2t, dim=1) * sim_targets, dim=1).mean()
    t2i_targets = pos_mask.t() / pos_mask.t().sum(1, keepdim=True)
    loss_t2i = -torch.sum(F.log_softmax(sim_t2i, dim=1) * t2i_targets, dim=1).mean()
    blip = (loss_i2t + loss_t2i) / 2
    torch.testing.assert_close(multi_positive_infonce(image, text, owner, temperature=temp), blip)


@pytest.mark.parametrize("variant", ["mean_log", "log_sum"])
def test_one_text_per_image_equals_open_clip(variant):
    open_clip_loss = pytest.importorskip("open_clip.loss")
    image, text, owner, _ = _batch([0, 1, 2, 3, 4], 5, seed=6)
    temp = 0.07
    clip = open_clip_loss.ClipLoss()(F.normalize(image, dim=-1), F.normalize(text, dim=-1),
                                     logit_scale=1 / temp)
    ours = multi_positive_infonce(image, text, owner, temperature=temp, variant=variant)
    torch.testing.assert_close(ours, clip)


def test_embeddings_are_normalised_inside():
    image, text, owner, neg = _batch([0, 1, 1], 2, num_neg=2, seed=7)
    scaled = multi_positive_infonce(3 * image, 0.5 * text, owner, neg_emb=7 * neg)
    torch.testing.assert_close(scaled, multi_positive_infonce(image, text, owner, neg_emb=neg))


@pytest.mark.parametrize("variant", ["mean_log", "log_sum"])
@pytest.mark.parametrize("scope", ["batch", "own"])
def test_gradcheck(variant, scope):
    image, text, owner, neg = _batch([0, 1, 1, 2, 2], 3, num_neg=4, dim=4, seed=8)
    neg_owner = torch.tensor([0, 0, 2, 2])  # image 1 has no negative of its own
    temperature = torch.tensor(0.3, dtype=torch.float64)
    inputs = tuple(x.requires_grad_() for x in (image, text, neg, temperature))

    def loss(i, t, n, temp):
        return multi_positive_infonce(i, t, owner, temperature=temp, neg_emb=n,
                                      neg_owner=neg_owner, variant=variant,
                                      hard_negative_scope=scope)

    assert torch.autograd.gradcheck(loss, inputs)


def _call(image_shape=(3, 4), text_shape=(4, 4), owner=(0, 1, 2, 2), **kw):
    return multi_positive_infonce(torch.randn(*image_shape), torch.randn(*text_shape),
                                  torch.tensor(owner), **kw)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(owner=(0, 1, 3, 2)), r"text_owner\[2\] = 3 is out of range: expected 0 <= owner < 3"),
        (dict(owner=(0, -1, 1, 2)), r"text_owner\[1\] = -1 is out of range"),
        (dict(owner=(0, 0, 2, 2)), r"images \[1\] have none"),
        (dict(owner=(0, 1, 2)), r"text_owner must have one entry per row of text_emb: "
                                r"expected shape \(4,\), found \(3,\)"),
        (dict(owner=(0.0, 1.0, 2.0, 2.0)), r"integer image indices; found torch.float32"),
        (dict(text_shape=(4, 5)), r"text_emb must have the embedding size of image_emb: "
                                  r"expected \(\*, 4\), found \(4, 5\)"),
        (dict(image_shape=(3, 4, 1)), r"image_emb must be 2-D"),
        (dict(image_shape=(0, 4), owner=()), r"at least one image"),
        (dict(variant="mil"), r"variant must be one of \('mean_log', 'log_sum'\); found 'mil'"),
        (dict(hard_negative_scope="all"), r"hard_negative_scope must be one of"),
        (dict(temperature=0.0), r"temperature must be > 0; found 0.0"),
        (dict(temperature=torch.ones(2)), r"temperature must be a scalar"),
        (dict(neg_emb=torch.randn(2, 4), hard_negative_scope="own"),
         r"hard_negative_scope='own' needs neg_owner"),
        (dict(neg_emb=torch.randn(2, 4), neg_owner=torch.tensor([0, 3])),
         r"neg_owner\[1\] = 3 is out of range"),
        (dict(neg_emb=torch.randn(2, 4), neg_owner=torch.tensor([0])),
         r"neg_owner must have one entry per row of neg_emb"),
        (dict(neg_emb=torch.randn(2, 3)), r"neg_emb must have the embedding size"),
        (dict(neg_owner=torch.tensor([0])), r"neg_owner was given without neg_emb"),
        (dict(label_smoothing=1.5), r"label_smoothing must be a number in \[0, 1\]; found 1.5"),
        (dict(label_smoothing=-0.1), r"label_smoothing must be a number in \[0, 1\]; found -0.1"),
    ],
)
def test_validation_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _call(**kwargs)


def test_docstring_example_runs():
    module = importlib.import_module("vlr_plugins.losses.functional")
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
