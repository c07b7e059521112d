"""Text-length extension: the stretch formula, and extended models that encode and train."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
import torch

from vlr_plugins.text import (
    extend_text_context,
    freeze_leading_rows,
    frozen_rows_param_groups,
    stretch_positional_embedding,
    tokenizer_for_length,
)

LONG_TEXT = " ".join(["a photo of a red car parked by the sea under a cloudy sky"] * 80)


def long_clip_reference(pre: torch.Tensor) -> torch.Tensor:
    """Long-CLIP's 77 -> 248 table, written from the paper's recipe as a plain loop.

    20 rows kept; each later row i < 76 becomes 4 rows (4-j)/4 pre[i] + j/4 pre[i+1];
    the last row becomes 4 rows pre[76] + j/4 (pre[76] - pre[75]).
    """
    length, dim = pre.shape
    keep = 20
    out = torch.zeros(4 * length - 3 * keep, dim, dtype=pre.dtype)
    for i in range(keep):
        out[i] = pre[i]
    for i in range(keep, length - 1):
        for j in range(4):
            out[keep + 4 * (i - keep) + j] = (4 - j) * pre[i] / 4 + j * pre[i + 1] / 4
    step = pre[length - 1] - pre[length - 2]
    for j in range(4):
        out[keep + 4 * (length - 1 - keep) + j] = pre[length - 1] + j * step / 4
    return out


def fraction_reference(pre: torch.Tensor, new_length: int, keep: int) -> torch.Tensor:
    """The documented formula row by row, with exact rational source positions."""
    length = pre.shape[0]
    rows = [pre[r] for r in range(keep)]
    for r in range(keep, new_length):
        p = keep + Fraction((r - keep) * (length - keep), new_length - keep)
        i, f = int(p), float(p - int(p))
        if i < length - 1:
            rows.append((1 - f) * pre[i] + f * pre[i + 1])
        else:
            rows.append(pre[-1] + f * (pre[-1] - pre[-2]))
    return torch.stack(rows)


# ---------------------------------------------------------------- the formula


def test_77_to_248_keep_20_is_long_clip_bit_for_bit():
    pre = torch.randn(77, 64, generator=torch.Generator().manual_seed(0))
    assert torch.equal(stretch_positional_embedding(pre, 248, keep=20), long_clip_reference(pre))


@pytest.mark.parametrize("length,new_length,keep", [
    (77, 248, 0), (77, 248, 20), (77, 100, 20), (77, 300, 0), (10, 23, 0), (10, 23, 3),
    (512, 600, 20), (5, 17, 4),
])
def test_general_lengths_follow_the_formula(length, new_length, keep):
    pre = torch.randn(length, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    out = stretch_positional_embedding(pre, new_length, keep=keep)
    assert out.shape == (new_length, 8)
    torch.testing.assert_close(out, fraction_reference(pre, new_length, keep), rtol=0, atol=1e-12)
    assert torch.equal(out[:keep], pre[:keep])
    # Wherever a new row lands exactly on an old one, it is that row.
    for r in range(keep, new_length):
        p = keep + Fraction((r - keep) * (length - keep), new_length - keep)
        if p.denominator == 1:
            assert torch.equal(out[r], pre[int(p)])


@pytest.mark.parametrize("length,new_length,keep", [(77, 248, 20), (77, 248, 0), (10, 23, 3)])
def test_a_linear_table_reads_back_its_source_positions(length, new_length, keep):
    pre = torch.arange(length, dtype=torch.float64).unsqueeze(1)  # row i holds i
    out = stretch_positional_embedding(pre, new_length, keep=keep)[:, 0]
    r = torch.arange(keep, new_length, dtype=torch.float64)
    expected = keep + (r - keep) * (length - keep) / (new_length - keep)
    torch.testing.assert_close(out[keep:], expected, rtol=0, atol=1e-12)
    assert bool((out.diff() > 0).all())  # strictly increasing positions
    assert out[-1] > length - 1 and out[-1] < length  # extrapolated, by less than one step


def test_tail_is_extrapolated_from_the_last_two_rows():
    pre = torch.randn(10, 4, dtype=torch.float64)
    out = stretch_positional_embedding(pre, 40, keep=2)  # factor 38/8 = 4.75
    step = pre[9] - pre[8]
    tail_rows = [r for r in range(2, 40) if 2 + (r - 2) * 8 // 38 == 9]
    assert tail_rows == [36, 37, 38, 39]
    for r in tail_rows:
        f = float(Fraction((r - 2) * 8, 38) - 7)
        torch.testing.assert_close(out[r], pre[9] + f * step, rtol=0, atol=1e-12)


def test_half_precision_keeps_its_dtype():
    pre = torch.randn(77, 8).half()
    out = stretch_positional_embedding(pre, 248)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.float(), long_clip_reference(pre.float()), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("new_length,keep", [(77, 20), (50, 20), (248, 77), (248, -1)])
def test_only_lengthens_with_a_valid_keep(new_length, keep):
    with pytest.raises(ValueError):
        stretch_positional_embedding(torch.randn(77, 8), new_length, keep=keep)


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
    from transformers import CLIPTextConfig

    return CLIPTextConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                          num_attention_heads=2, max_position_embeddings=77, **kw)


def test_transformers_clip_text_model_encodes_248_tokens(tmp_path):
    from transformers import CLIPTextModel

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


def test_transformers_clip_model_records_the_text_length():
    from transformers import CLIPConfig, CLIPModel

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
def test_bert_style_encoder_goes_past_512(kind):
    import transformers

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


def test_blip_text_encoder_with_its_tokenizer_at_600():
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


def test_without_train_new_only_every_row_trains():
    from transformers import CLIPTextModel

    model = extend_text_context(CLIPTextModel(_tiny_clip_text_config()), 248, train_new_only=False)
    table = model.embeddings.position_embedding.weight
    assert not hasattr(table, "frozen_rows")
    before = table.detach().clone()
    out = model(input_ids=torch.randint(0, 100, (1, 248))).last_hidden_state
    _sgd_step(model, _random_loss(out))
    assert not torch.isclose(table.detach(), before).all(dim=1).any()


def test_weight_decay_needs_the_param_groups_to_spare_frozen_rows():
    from transformers import CLIPTextModel

    torch.manual_seed(0)
    model = extend_text_context(CLIPTextModel(_tiny_clip_text_config()), 248)
    table = model.embeddings.position_embedding.weight
    assert table.frozen_rows == 20
    before = table.detach().clone()

    groups = frozen_rows_param_groups(model)
    assert [g.get("weight_decay") for g in groups] == [None, 0.0]
    assert groups[1]["params"] == [table]
    opt = torch.optim.AdamW(groups, lr=0.1, weight_decay=0.5)
    _random_loss(model(input_ids=torch.randint(0, 100, (1, 248))).last_hidden_state).backward()
    opt.step()
    assert torch.equal(table.detach()[:20], before[:20])

    decayed = torch.optim.AdamW([table], lr=0.1, weight_decay=0.5)  # the pitfall
    decayed.step()
    assert not torch.equal(table.detach()[:20], before[:20])


def test_freeze_leading_rows_again_updates_its_hook():
    param = torch.nn.Parameter(torch.ones(6, 2))
    freeze_leading_rows(param, 2)
    freeze_leading_rows(param, 4)
    (param * 3).sum().backward()
    assert param.frozen_rows == 4
    assert torch.equal(param.grad[:4], torch.zeros(4, 2))
    assert torch.equal(param.grad[4:], torch.full((2, 2), 3.0))


def test_unsupported_models_are_named():
    with pytest.raises(TypeError, match="Linear"):
        extend_text_context(torch.nn.Linear(2, 2), 248)
