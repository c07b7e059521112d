"""Text-length extension: open_clip, transformers and BLIP models (and their tokenizers) that
encode and train at a longer context. Each test needs open_clip or transformers and is
skipped without it; the stretch formula and frozen rows alone are in test_positions.py."""

from __future__ import annotations

import json

import pytest
import torch

from vlr_plugins.text import extend_text_context, stretch_positional_embedding, tokenizer_for_length

LONG_TEXT = " ".join(["a photo of a red car parked by the sea under a cloudy sky"] * 80)


@pytest.fixture
def transformers():
    return pytest.importorskip("transformers")


# ---------------------------------------------------------------- models


def _sgd_step(model, loss):
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    opt.zero_grad()
    loss.backward()
    opt.step()


def _assert_only_new_rows_trained(before, after, keep):
    assert torch.equal(after[:keep], before[:keep])
    assert not torch.isclose(after[keep:], before[keep:]).all(dim=1).any()


def _random_loss(out):
    return (out * torch.randn_like(out)).sum()


@pytest.fixture(scope="module")
def open_clip_names(tmp_path_factory):
    open_clip = pytest.importorskip("open_clip")
    folder = tmp_path_factory.mktemp("open_clip_configs")
    text = {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1}
    vision = {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16}
    names = {"clip": "vlr-test-tiny-length", "custom": "vlr-test-tiny-length-custom"}
    for kind, name in names.items():
        cfg = {"embed_dim": 16, "vision_cfg": vision, "text_cfg": text}
        if kind == "custom":
            cfg["custom_text"] = True
        (folder / f"{name}.json").write_text(json.dumps(cfg))
    open_clip.add_model_config(folder)
    return names


@pytest.mark.parametrize("kind", ["clip", "custom"])
def test_open_clip_model_encodes_248_tokens_and_trains_only_new_rows(open_clip_names, kind):
    import open_clip

    name = open_clip_names[kind]
    torch.manual_seed(0)
    model = open_clip.create_model(name, pretrained=None)
    tower = model.text if kind == "custom" else model
    old = tower.positional_embedding.detach().clone()

    assert extend_text_context(model, 248, keep=20) is model
    assert model.context_length == tower.context_length == 248
    assert torch.equal(tower.positional_embedding.detach(), stretch_positional_embedding(old, 248))
    assert tower.attn_mask.shape == (248, 248)
    assert torch.equal(tower.attn_mask, torch.full((248, 248), float("-inf")).triu(1))
    if kind == "custom":
        assert tower.num_pos == 248

    tokenizer = tokenizer_for_length(name, 248)
    tokens = tokenizer([LONG_TEXT, "a short one"])
    assert tokens.shape == (2, 248)
    assert open_clip.get_model_tokenize_cfg(model)["context_length"] == 248

    before = tower.positional_embedding.detach().clone()
    out = model.encode_text(tokens)
    assert out.shape == (2, 16)
    _sgd_step(model, _random_loss(out))
    _assert_only_new_rows_trained(before, tower.positional_embedding.detach(), 20)


def test_open_clip_tokenizer_instance_is_copied():
    open_clip = pytest.importorskip("open_clip")
    base = open_clip.tokenizer.SimpleTokenizer()
    long = tokenizer_for_length(base, 248)
    assert base.context_length == 77 and long.context_length == 248
    assert long([LONG_TEXT]).shape == (1, 248)


def _tiny_clip_text_config(**kw):
    from transformers import CLIPTextConfig  # the tests calling this take the fixture

    return CLIPTextConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                          num_attention_heads=2, max_position_embeddings=77, **kw)


def test_transformers_clip_text_model_encodes_248_tokens(transformers, tmp_path):
    CLIPTextModel = transformers.CLIPTextModel
    torch.manual_seed(0)
    model = CLIPTextModel(_tiny_clip_text_config())
    table = model.embeddings.position_embedding
    old = table.weight.detach().clone()
    extend_text_context(model, 248)
    assert model.config.max_position_embeddings == 248 == table.num_embeddings
    assert torch.equal(table.weight.detach(), stretch_positional_embedding(old, 248))
    assert torch.equal(model.embeddings.position_ids, torch.arange(248).unsqueeze(0))

    before = table.weight.detach().clone()
    out = model(input_ids=torch.randint(0, 100, (2, 248))).last_hidden_state
    assert out.shape == (2, 248, 32)
    _sgd_step(model, _random_loss(out))
    _assert_only_new_rows_trained(before, table.weight.detach(), 20)

    model.save_pretrained(tmp_path)
    again = CLIPTextModel.from_pretrained(tmp_path)
    assert torch.equal(again.embeddings.position_embedding.weight, table.weight)


def test_transformers_clip_model_records_the_text_length(transformers):
    CLIPConfig, CLIPModel = transformers.CLIPConfig, transformers.CLIPModel
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
              "num_attention_heads": 2, "image_size": 32, "patch_size": 16}
    model = CLIPModel(CLIPConfig(text_config=_tiny_clip_text_config().to_dict(),
                                 vision_config=vision, projection_dim=16))
    extend_text_context(model, 248)
    assert model.config.text_config.max_position_embeddings == 248
    features = model.get_text_features(input_ids=torch.randint(0, 100, (2, 248)))
    features = getattr(features, "pooler_output", features)
    assert features.shape == (2, 16)


BERT_SIZES = {"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 1,
              "num_attention_heads": 2, "intermediate_size": 64}


@pytest.mark.parametrize("kind", ["BlipTextModel", "BertModel"])
def test_bert_style_encoder_goes_past_512(transformers, kind):
    config_cls = {"BlipTextModel": "BlipTextConfig", "BertModel": "BertConfig"}[kind]
    torch.manual_seed(0)
    model = getattr(transformers, kind)(getattr(transformers, config_cls)(**BERT_SIZES),
                                        add_pooling_layer=False)
    table = model.embeddings.position_embeddings
    extend_text_context(model, 600)
    assert model.config.max_position_embeddings == 600 == table.weight.shape[0]
    before = table.weight.detach().clone()
    out = model(input_ids=torch.randint(5, 100, (2, 600)),
                attention_mask=torch.ones(2, 600, dtype=torch.long)).last_hidden_state
    assert out.shape == (2, 600, 32)
    _sgd_step(model, _random_loss(out))
    _assert_only_new_rows_trained(before, table.weight.detach(), 20)


def test_blip_text_encoder_with_its_tokenizer_at_600(transformers):
    pytest.importorskip("tokenizers")
    from vlr_plugins.text import BlipTextEncoder, build_wordpiece_tokenizer, words_of

    torch.manual_seed(0)
    encoder = BlipTextEncoder(config=BERT_SIZES, embed_dim=16)
    extend_text_context(encoder, 600, keep=20)
    assert encoder.max_positions == 600
    assert encoder.to_config()["config"]["max_position_embeddings"] == 600

    base = build_wordpiece_tokenizer(words_of([LONG_TEXT]))
    tokenizer = tokenizer_for_length(base, 600)
    assert base.model_max_length == 512 and tokenizer.model_max_length == 600
    batch = tokenizer([LONG_TEXT, "a red car"], truncation=True, padding=True, return_tensors="pt")
    assert batch["input_ids"].shape == (2, 600)

    table = encoder.text_encoder.embeddings.position_embeddings.weight
    before = table.detach().clone()
    emb = encoder(batch["input_ids"], batch["attention_mask"])
    assert emb.shape == (2, 16)
    _sgd_step(encoder, _random_loss(emb))
    _assert_only_new_rows_trained(before, table.detach(), 20)


# ---------------------------------------------------------------- freezing options


def test_without_train_new_only_every_row_trains(transformers):
    model = extend_text_context(transformers.CLIPTextModel(_tiny_clip_text_config()), 248,
                                train_new_only=False)
    table = model.embeddings.position_embedding.weight
    assert not hasattr(table, "frozen_rows")
    before = table.detach().clone()
    out = model(input_ids=torch.randint(0, 100, (1, 248))).last_hidden_state
    _sgd_step(model, _random_loss(out))
    assert not torch.isclose(table.detach(), before).all(dim=1).any()


def test_kept_rows_stay_exact_under_adamw_weight_decay_on_every_parameter(transformers):
    torch.manual_seed(0)
    model = extend_text_context(transformers.CLIPTextModel(_tiny_clip_text_config()), 248)
    table = model.embeddings.position_embedding.weight
    assert table.frozen_rows == 20
    before = table.detach().clone()
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.5)  # decays the table too
    for _ in range(3):
        opt.zero_grad()
        _random_loss(model(input_ids=torch.randint(0, 100, (1, 248))).last_hidden_state).backward()
        opt.step()
    _assert_only_new_rows_trained(before, table.detach(), 20)


def test_unsupported_models_are_named():
    with pytest.raises(TypeError, match="Linear"):
        extend_text_context(torch.nn.Linear(2, 2), 248)
