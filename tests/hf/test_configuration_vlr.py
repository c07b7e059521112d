"""VlrTextEncoderConfig: the fields of a retrieval text encoder, round-tripped through config.json."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from transformers import AutoConfig, BlipTextConfig  # noqa: E402

import vlr_plugins.hf  # noqa: E402
from vlr_plugins.hf import VlrTextEncoderConfig  # noqa: E402

TEXT = dict(vocab_size=60, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=160, pad_token_id=0, bos_token_id=2, sep_token_id=3)
SPACE = {"model": "Salesforce/blip-itm-base-coco", "projection": "vision_proj", "dim": 16, "normalized": True}


def make_config(**changes) -> VlrTextEncoderConfig:
    fields = dict(text_config=TEXT, embed_dim=16, token_budgets={"caption": 77, "paragraph": 128},
                  image_embedding_space=SPACE, recipe="C5")
    return VlrTextEncoderConfig(**{**fields, **changes})


def test_config_round_trips_through_save_pretrained(tmp_path):
    config = make_config()
    config.save_pretrained(tmp_path)
    back = VlrTextEncoderConfig.from_pretrained(tmp_path)

    assert back.to_dict() == config.to_dict()
    assert isinstance(back.text_config, BlipTextConfig)
    assert back.token_budgets == {"caption": 77, "paragraph": 128}
    assert back.image_embedding_space == SPACE and back.recipe == "C5"
    # the whole text architecture is written, cross-attention switch included
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "vlr_blip_text_encoder"
    assert saved["text_config"]["is_decoder"] is True
    assert saved["text_config"]["max_position_embeddings"] == 160


def test_autoconfig_knows_the_model_type_once_vlr_plugins_hf_is_imported(tmp_path):
    make_config().save_pretrained(tmp_path)
    assert type(AutoConfig.from_pretrained(tmp_path)) is VlrTextEncoderConfig
    assert type(AutoConfig.for_model("vlr_blip_text_encoder")) is VlrTextEncoderConfig
    vlr_plugins.hf.register_auto_classes()  # idempotent
    assert type(AutoConfig.from_pretrained(tmp_path)) is VlrTextEncoderConfig


def test_registration_refuses_a_model_type_held_by_another_class(monkeypatch):
    class Impostor(VlrTextEncoderConfig):
        model_type = "bert"

    monkeypatch.setattr(vlr_plugins.hf.family, "FAMILY",
                        ((Impostor, vlr_plugins.hf.VlrTextEncoderModel),))
    with pytest.raises(ValueError, match="'bert' is already registered to .*BertConfig"):
        vlr_plugins.hf.register_auto_classes()


def test_token_budgets_name_the_budget_of_each_view():
    config = make_config()
    assert config.default_max_tokens == 128  # the largest budget
    assert config.max_tokens_for("caption") == 77
    assert config.max_tokens_for() == 128
    with pytest.raises(KeyError, match="no token budget for view 'title' \\(budgets: caption, paragraph\\)"):
        config.max_tokens_for("title")
    # without budgets, the encoder's positions
    assert make_config(token_budgets=None).max_tokens_for() == 160


@pytest.mark.parametrize(("changes", "message"), [
    (dict(embed_dim=0), "embed_dim must be a positive int, found 0"),
    (dict(token_budgets={"paragraph": "long"}), "token_budgets\\['paragraph'\\] must be a positive int"),
    (dict(token_budgets={"paragraph": 512}), "token budgets .*'paragraph': 512.* exceed the text encoder's 160"),
    (dict(image_embedding_space={**SPACE, "dim": 256}),
     "image_embedding_space\\['dim'\\] must equal embed_dim \\(16\\)"),
    (dict(text_config=[1, 2]), "text_config must be a BlipTextConfig or a dict, found list"),
])
def test_invalid_fields_say_what_was_expected(changes, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make_config(**changes)
