"""VlrTextEncoderModel: vlr-plugins' BlipTextEncoder as a transformers PreTrainedModel, weights 1:1."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import torch  # noqa: E402
from torch import nn  # noqa: E402

from vlr_plugins.hf import VlrTextEncoderConfig, VlrTextEncoderModel, VlrTextEncoderOutput  # noqa: E402


@pytest.fixture(scope="module")
def model(tiny_encoder):
    return VlrTextEncoderModel.from_vlr_encoder(tiny_encoder, token_budgets={"caption": 77, "paragraph": 128})


def test_from_vlr_encoder_copies_every_weight_exactly(tiny_encoder, model):
    ours = tiny_encoder.state_dict()
    theirs = model.state_dict()
    assert set(ours) == set(theirs)
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert isinstance(model.config, VlrTextEncoderConfig)
    assert model.config.embed_dim == 16 and model.config.text_config.max_position_embeddings == 160
    assert not model.training


def test_embeddings_equal_the_vlr_encoder(tiny_encoder, model, tiny_batch):
    with torch.no_grad():
        expected = tiny_encoder(tiny_batch["input_ids"], tiny_batch["attention_mask"])
        got = model.encode_text(**tiny_batch)  # token_type_ids from the tokenizer are accepted
    assert torch.equal(got, expected)
    # random weights that do something: texts get different embeddings
    assert torch.cdist(got, got).fill_diagonal_(1.0).min() > 1e-2


def test_get_text_features_is_encode_text_and_unit_norm(model, tiny_batch):
    with torch.no_grad():
        out = model(**tiny_batch)
        features = model.get_text_features(**tiny_batch)
    assert isinstance(out, VlrTextEncoderOutput)
    assert torch.equal(features, model.encode_text(**tiny_batch)) and torch.equal(features, out.text_embeds)
    assert features.shape == (3, 16)
    torch.testing.assert_close(features.norm(dim=-1), torch.ones(3))
    assert out.last_hidden_state.shape == (3, tiny_batch["input_ids"].shape[1], 32)
    embeds, hidden = model(**tiny_batch, return_dict=False)
    assert torch.equal(embeds, out.text_embeds) and torch.equal(hidden, out.last_hidden_state)


def test_missing_attention_mask_means_no_padding(model, tiny_batch):
    ids = tiny_batch["input_ids"][:1, :8]
    with torch.no_grad():
        assert torch.equal(model.encode_text(ids), model.encode_text(ids, torch.ones_like(ids)))


def test_texts_longer_than_the_positions_are_refused(model):
    ids = torch.full((1, 161), 7)
    with pytest.raises(ValueError, match="161 tokens exceed the text encoder's 160 positions"):
        model.encode_text(ids)


def test_cross_attention_stays_frozen_as_in_training(model, tmp_path):
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert frozen and all("crossattention" in n for n in frozen)
    model.save_pretrained(tmp_path)
    back = VlrTextEncoderModel.from_pretrained(tmp_path, use_safetensors=True)
    assert {n for n, p in back.named_parameters() if not p.requires_grad} == frozen


def test_save_pretrained_round_trips_weights_and_config(model, tiny_batch, tmp_path):
    model.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    back = VlrTextEncoderModel.from_pretrained(tmp_path, use_safetensors=True)
    assert back.config.token_budgets == {"caption": 77, "paragraph": 128}
    with torch.no_grad():
        assert torch.equal(back.encode_text(**tiny_batch), model.encode_text(**tiny_batch))


def test_from_vlr_encoder_names_what_it_expected():
    with pytest.raises(TypeError, match="expected a BlipTextEncoder .* found Linear"):
        VlrTextEncoderModel.from_vlr_encoder(nn.Linear(2, 2))


def test_from_vlr_encoder_keeps_the_architecture_fields_to_the_encoder(tiny_encoder):
    with pytest.raises(TypeError, match="embed_dim comes from the encoder"):
        VlrTextEncoderModel.from_vlr_encoder(tiny_encoder, embed_dim=8)
