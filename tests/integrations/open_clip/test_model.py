"""TextBatchCLIP: open_clip's model with several texts per image; checkpoints stay open_clip's."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("open_clip_train")
import open_clip  # noqa: E402

from vlr_plugins.integrations.open_clip import (  # noqa: E402
    TextBatchCLIP,
    TextItem,
    collate_text_batch,
)


@pytest.fixture(scope="module")
def model(tiny_model):
    torch.manual_seed(0)
    return open_clip.create_model(tiny_model, output_dict=True)


def test_state_dict_is_the_inner_models_also_inside_a_parent(model):
    wrapped = TextBatchCLIP(model)
    mine, theirs = wrapped.state_dict(), model.state_dict()
    assert list(mine) == list(theirs)
    assert all(torch.equal(mine[k], theirs[k]) for k in theirs)
    parent = torch.nn.Sequential(wrapped)  # as DistributedDataParallel nests it under "module."
    assert list(parent.state_dict()) == [f"0.{k}" for k in theirs]
    changed = {k: v + 1 if v.is_floating_point() else v for k, v in theirs.items()}
    parent.load_state_dict({f"0.{k}": v for k, v in changed.items()})
    assert torch.equal(model.logit_scale, changed["logit_scale"])
    wrapped.load_state_dict(theirs)
    assert torch.equal(model.logit_scale, theirs["logit_scale"])


def test_attributes_and_plain_tokens_are_the_inner_models(model):
    wrapped = TextBatchCLIP(model)
    assert wrapped.logit_scale is model.logit_scale and wrapped.encode_text == model.encode_text
    assert not hasattr(wrapped, "module"), "open_clip_train's unwrap_model must not unwrap it"
    images, tokens = torch.randn(2, 3, 32, 32), open_clip.get_tokenizer("vlr-tiny")(["a", "b"])
    with torch.no_grad():
        out, expected = wrapped(images, tokens), model(images, tokens)
    assert out.keys() == expected.keys()
    assert all(torch.equal(out[k], expected[k]) for k in out)


def test_a_text_batch_gives_features_with_owners(model):
    tok = open_clip.get_tokenizer("vlr-tiny")
    images, batch = collate_text_batch(
        [
            (torch.randn(3, 32, 32), TextItem("a", tok(["one", "two"]), tok(["not one"]))),
            (torch.randn(3, 32, 32), TextItem("b", tok(["three"]))),
        ]
    )
    with torch.no_grad():
        out = TextBatchCLIP(model)(images, batch)
        text = model.encode_text(batch.tokens, normalize=True)
    assert out["text_owner"].tolist() == [0, 0, 1] and out["neg_owner"].tolist() == [0]
    assert out["image_features"].shape == (2, 16) and out["neg_features"].shape == (1, 16)
    torch.testing.assert_close(out["text_features"], text)


def test_precomputed_image_embeddings_skip_the_vision_tower(model):
    tok = open_clip.get_tokenizer("vlr-tiny")
    emb = torch.randn(2, 16) * 3
    _, batch = collate_text_batch(
        [(emb[0], TextItem("a", tok(["x"]))), (emb[1], TextItem("b", tok(["y"])))],
        images_are_embeddings=True,
    )
    with torch.no_grad():
        out = TextBatchCLIP(model)(emb, batch)
    torch.testing.assert_close(out["image_features"], torch.nn.functional.normalize(emb, dim=-1))
