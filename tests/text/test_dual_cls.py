"""DualCLSTextEncoder: one CLS per caption view on BERT's text layers, fusion layers for VTM/MLM."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from vlr_plugins.errors import ConfigError, MissingFileError  # noqa: E402
from vlr_plugins.registry import MODELS  # noqa: E402
from vlr_plugins.specs import load_text_encoder  # noqa: E402
from vlr_plugins.text import VIEWS, DualCLSTextEncoder, build_wordpiece_tokenizer  # noqa: E402

WORDS = ("a the red blue small old dog cat man woman car boat beach road sits runs rides near on with "
         "and two of in").split()
TEXTS = ["A red car near the beach.", "two old dogs sit on a boat", "a man rides a blue car on the road"]
HIDDEN, LAYERS, FUSION, VIDEO_WIDTH = 32, 3, 1, 24


@pytest.fixture(scope="module")
def tok():
    return build_wordpiece_tokenizer(WORDS)


@pytest.fixture(scope="module")
def tok_dir(tok, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tokenizer")
    tok.save_pretrained(folder)
    return str(folder)


def bert_config(tok) -> dict:
    # initializer_range 0.5: random weights that tell texts (and CLS tokens) apart clearly
    return dict(vocab_size=len(tok), hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=160, initializer_range=0.5)


def make(tok, tok_dir, seed=0, **kwargs):
    torch.manual_seed(seed)
    kwargs = {"embed_dim": 16, "num_fusion_layers": FUSION, "video_width": VIDEO_WIDTH, **kwargs}
    return DualCLSTextEncoder(config=bert_config(tok), tokenizer=tok_dir, **kwargs).eval()


def set_detailed_cls_apart(enc, seed=1):
    """What training does to the detailed CLS, in one random step (both views start equal)."""
    with torch.no_grad():
        enc.cls_embeddings[-1] += torch.randn(HIDDEN, generator=torch.Generator().manual_seed(seed))


def batch(tok, texts=TEXTS):
    return tok(texts, truncation=True, max_length=128, padding=True, return_tensors="pt")


def reference_embeddings(enc, ids, mask, view_ids):
    """A plain BertModel of only the text layers, fed BERT's embeddings with position 0's replaced."""
    from transformers import BertConfig, BertModel

    config = BertConfig(**{**enc.bert.config.to_dict(), "num_hidden_layers": enc.num_text_layers})
    ref = BertModel(config, add_pooling_layer=False).eval()
    result = ref.load_state_dict(enc.bert.state_dict(), strict=False)
    assert not result.missing_keys
    assert {k.split(".")[2] for k in result.unexpected_keys} == {str(i) for i in range(enc.num_text_layers, LAYERS)}
    words = enc.bert.embeddings.word_embeddings(ids).clone()
    rows = view_ids if enc.dual_cls else torch.zeros_like(view_ids)
    words[:, 0] = enc.cls_embeddings[rows]
    hidden = ref(inputs_embeds=words, attention_mask=mask).last_hidden_state
    return F.normalize(enc.text_proj(hidden[:, 0]), dim=-1)


def test_the_embedding_is_the_view_cls_state_of_the_text_layers_only(tok, tok_dir):
    enc = make(tok, tok_dir)
    set_detailed_cls_apart(enc)
    b = batch(tok)
    with torch.no_grad():
        for view in (0, 1):
            view_ids = torch.full((3,), view)
            out = enc.encode(b["input_ids"], b["attention_mask"], view_ids)
            assert out.embeds.shape == (3, 16) and out.hidden.shape == (3, b["input_ids"].shape[1], HIDDEN)
            torch.testing.assert_close(out.embeds, reference_embeddings(enc, b["input_ids"], b["attention_mask"],
                                                                        view_ids))
            torch.testing.assert_close(out.embeds.norm(dim=-1), torch.ones(3))
            assert torch.equal(enc(b["input_ids"], b["attention_mask"], view_ids), out.embeds)
    assert (enc.num_text_layers, enc.num_fusion_layers, enc.max_tokens) == (2, 1, 128)


def test_every_view_starts_from_berts_cls_embedding(tok, tok_dir):
    enc = make(tok, tok_dir)
    cls_row = enc.bert.embeddings.word_embeddings.weight[tok.cls_token_id]
    assert enc.cls_token_id == tok.cls_token_id == 2  # read from the tokenizer
    assert enc.cls_embeddings.shape == (len(VIEWS), HIDDEN) == (2, HIDDEN)
    for row in enc.cls_embeddings:
        assert torch.equal(row, cls_row)
    # a copy, not the word embedding itself: training one leaves the other
    assert enc.cls_embeddings.data_ptr() != enc.bert.embeddings.word_embeddings.weight.data_ptr()
    # so before training both views embed a text as plain BERT's [CLS] does
    b = batch(tok)
    with torch.no_grad():
        summary = enc(b["input_ids"], b["attention_mask"], torch.zeros(3, dtype=torch.long))
        detailed = enc(b["input_ids"], b["attention_mask"], torch.ones(3, dtype=torch.long))
        plain = reference_embeddings(enc, b["input_ids"], b["attention_mask"], torch.zeros(3, dtype=torch.long))
    assert torch.equal(summary, detailed)
    torch.testing.assert_close(summary, plain)


def test_a_loss_on_one_view_sends_no_gradient_into_the_other_views_cls(tok, tok_dir):
    enc = make(tok, tok_dir).train()
    b = batch(tok)
    target = F.normalize(torch.randn(3, 16, generator=torch.Generator().manual_seed(3)), dim=-1)
    for view in (0, 1):
        enc.zero_grad(set_to_none=True)
        emb = enc(b["input_ids"], b["attention_mask"], torch.full((3,), view))
        (1 - (emb * target).sum(-1)).mean().backward()
        grad = enc.cls_embeddings.grad
        assert grad[view].abs().sum() > 0
        assert torch.count_nonzero(grad[1 - view]) == 0
    # in a mixed batch, a loss on the summary rows alone leaves the detailed CLS alone too
    enc.zero_grad(set_to_none=True)
    emb = enc(b["input_ids"], b["attention_mask"], torch.tensor([0, 1, 0]))
    emb[[0, 2]].sum().backward()
    assert enc.cls_embeddings.grad[0].abs().sum() > 0 and torch.count_nonzero(enc.cls_embeddings.grad[1]) == 0


def test_training_one_view_gives_the_two_views_different_embeddings_of_the_same_text(tok, tok_dir):
    enc = make(tok, tok_dir).train()
    b = batch(tok)
    start = enc.cls_embeddings.detach().clone()
    target = F.normalize(torch.randn(3, 16, generator=torch.Generator().manual_seed(4)), dim=-1)
    optimiser = torch.optim.SGD(enc.parameters(), lr=0.5)
    for _ in range(3):
        optimiser.zero_grad()
        emb = enc(b["input_ids"], b["attention_mask"], torch.ones(3, dtype=torch.long))
        (1 - (emb * target).sum(-1)).mean().backward()
        optimiser.step()
    assert torch.equal(enc.cls_embeddings[0], start[0]) and not torch.equal(enc.cls_embeddings[1], start[1])
    enc.eval()
    with torch.no_grad():
        summary, detailed = (enc.encode_text(TEXTS, view=view) for view in VIEWS)
    assert (summary - detailed).norm(dim=-1).min() > 1e-3


def test_a_mixed_view_batch_equals_encoding_each_view_separately(tok, tok_dir):
    enc = make(tok, tok_dir)
    set_detailed_cls_apart(enc)
    texts = TEXTS + ["the cat"]
    b = batch(tok, texts)
    view_ids = torch.tensor([1, 0, 1, 0])
    with torch.no_grad():
        mixed = enc(b["input_ids"], b["attention_mask"], view_ids)
        each = {view: enc.encode_text(texts, view=view) for view in VIEWS}
    for row, view in enumerate(view_ids.tolist()):
        torch.testing.assert_close(mixed[row], each[VIEWS[view]][row])
    # no view_ids: every row is a summary caption
    with torch.no_grad():
        torch.testing.assert_close(enc(b["input_ids"], b["attention_mask"]), each["summary"])


def test_single_cls_uses_one_cls_for_every_view(tok, tok_dir):
    enc = make(tok, tok_dir, dual_cls=False)
    assert enc.cls_embeddings.shape == (1, HIDDEN)
    set_detailed_cls_apart(enc)  # moves the only CLS there is
    b = batch(tok)
    with torch.no_grad():
        summary = enc(b["input_ids"], b["attention_mask"], torch.zeros(3, dtype=torch.long))
        detailed = enc(b["input_ids"], b["attention_mask"], torch.ones(3, dtype=torch.long))
        mixed = enc(b["input_ids"], b["attention_mask"], torch.tensor([1, 0, 1]))
    assert torch.equal(summary, detailed) and torch.equal(summary, mixed)
    torch.testing.assert_close(summary, reference_embeddings(enc, b["input_ids"], b["attention_mask"],
                                                             torch.ones(3, dtype=torch.long)))
    enc.zero_grad(set_to_none=True)
    enc(b["input_ids"], b["attention_mask"], torch.ones(3, dtype=torch.long)).sum().backward()
    assert enc.cls_embeddings.grad.abs().sum() > 0
    assert MODELS.build(enc.to_config()).dual_cls is False


def _attend(query, key, value, bias, heads):
    n, lq, width = query.shape
    q, k, v = (x.view(n, -1, heads, width // heads).transpose(1, 2) for x in (query, key, value))
    scores = q @ k.transpose(-1, -2) / math.sqrt(width // heads) + bias
    return (scores.softmax(-1) @ v).transpose(1, 2).reshape(n, lq, width)


def reference_fuse(enc, hidden, text_mask, video, video_mask):
    """UMT's fusion layer written out: self-attention, cross-attention to the video, feed-forward,
    each with its residual and LayerNorm, straight from the weights."""
    heads = enc.bert.config.num_attention_heads
    text_bias = torch.where(text_mask.bool(), 0.0, -1e9)[:, None, None, :]
    video_bias = torch.where(video_mask.bool(), 0.0, -1e9)[:, None, None, :]
    for layer, cross in zip(enc.bert.encoder.layer[enc.num_text_layers:], enc.crossattention):
        sa = layer.attention
        h = _attend(sa.self.query(hidden), sa.self.key(hidden), sa.self.value(hidden), text_bias, heads)
        hidden = sa.output.LayerNorm(sa.output.dense(h) + hidden)
        c = _attend(cross.query(hidden), cross.key(video), cross.value(video), video_bias, heads)
        hidden = cross.LayerNorm(cross.dense(c) + hidden)
        ffn = F.gelu(layer.intermediate.dense(hidden))
        hidden = layer.output.LayerNorm(layer.output.dense(ffn) + hidden)
    return hidden


def test_fuse_runs_the_fusion_layers_with_cross_attention_to_the_video(tok, tok_dir):
    enc = make(tok, tok_dir, num_fusion_layers=2)
    assert (enc.num_text_layers, enc.num_fusion_layers, enc.video_width) == (1, 2, VIDEO_WIDTH)
    b = batch(tok)
    g = torch.Generator().manual_seed(5)
    video = torch.randn(3, 6, VIDEO_WIDTH, generator=g)
    video_mask = torch.ones(3, 6, dtype=torch.long)
    video_mask[1, 4:] = 0
    with torch.no_grad():
        out = enc.encode(b["input_ids"], b["attention_mask"], torch.tensor([0, 1, 0]))
        fused = enc.fuse(out.hidden, b["attention_mask"], video, video_mask)
        assert fused.shape == out.hidden.shape == (3, b["input_ids"].shape[1], HIDDEN)
        torch.testing.assert_close(fused, reference_fuse(enc, out.hidden, b["attention_mask"], video, video_mask))
        # the video is read: other videos give other states, masked-out tokens change nothing
        other = enc.fuse(out.hidden, b["attention_mask"], torch.randn(3, 6, VIDEO_WIDTH, generator=g), video_mask)
        assert (other - fused).abs().amax(dim=(1, 2)).min() > 1e-3
        hidden_change = video.clone()
        hidden_change[1, 4:] += 10.0
        torch.testing.assert_close(enc.fuse(out.hidden, b["attention_mask"], hidden_change, video_mask), fused)
        # no mask: every video token is attended
        torch.testing.assert_close(enc.fuse(out.hidden, b["attention_mask"], video),
                                   enc.fuse(out.hidden, b["attention_mask"], video, torch.ones(3, 6)))
    with pytest.raises(ValueError, match=rf"video tokens must be \(N=3, T, {VIDEO_WIDTH}\), found \(3, 6, 32\)"):
        enc.fuse(out.hidden, b["attention_mask"], torch.randn(3, 6, 32))
    with pytest.raises(ValueError, match="no fusion layers"):
        make(tok, tok_dir, num_fusion_layers=0).fuse(out.hidden, b["attention_mask"], video)


def test_the_mlm_head_is_berts_tied_to_the_word_embeddings(tok, tok_dir):
    enc = make(tok, tok_dir)
    words = enc.bert.embeddings.word_embeddings.weight
    assert enc.mlm_head.predictions.decoder.weight is words
    assert enc.mlm_head.predictions.decoder.bias is enc.mlm_head.predictions.bias
    hidden = torch.randn(2, 5, HIDDEN, generator=torch.Generator().manual_seed(6))
    transform = enc.mlm_head.predictions.transform
    with torch.no_grad():
        expected = transform.LayerNorm(F.gelu(transform.dense(hidden))) @ words.T + enc.mlm_head.predictions.bias
        torch.testing.assert_close(enc.mlm_logits(hidden), expected)
        assert enc.mlm_logits(hidden).shape == (2, 5, len(tok))
        words[7] += 1.0  # the logits read the embeddings as they are now
        torch.testing.assert_close(enc.mlm_logits(hidden)[..., 7], (transform.LayerNorm(F.gelu(
            transform.dense(hidden))) @ words[7]) + enc.mlm_head.predictions.bias[7])


def test_encode_text_truncates_captions_at_128_tokens(tok, tok_dir):
    enc = make(tok, tok_dir)
    set_detailed_cls_apart(enc)
    long_text = " ".join(["a red car near the beach"] * 40)  # 240 words
    full = tok([long_text])["input_ids"][0]
    assert len(full) == 242
    truncated = torch.tensor([full[:127] + [tok.sep_token_id]])
    with torch.no_grad():
        got = enc.encode_text([long_text, "a dog"], view="detailed")
        expected = enc(truncated, torch.ones_like(truncated), torch.ones(1, dtype=torch.long))
    torch.testing.assert_close(got[:1], expected)
    # a longer budget reads further: the 128 is the encoder's, not the text's
    longer = make(tok, tok_dir, max_tokens=150)
    longer.load_state_dict(enc.state_dict())
    with torch.no_grad():
        assert not torch.allclose(longer.encode_text(long_text, view="detailed"), got[:1])
    ids = torch.full((1, 161), 7)
    with pytest.raises(ValueError, match="texts of 161 tokens exceed the encoder's 160 positions"):
        enc(ids, torch.ones_like(ids))


def test_to_config_rebuilds_it_and_a_vlr_train_checkpoint_loads(tok, tok_dir, tmp_path):
    enc = make(tok, tok_dir)
    set_detailed_cls_apart(enc)
    config = enc.to_config()
    assert config["type"] == "DualCLSTextEncoder" and MODELS.get("DualCLSTextEncoder") is DualCLSTextEncoder
    assert {k: config[k] for k in ("embed_dim", "num_fusion_layers", "video_width", "dual_cls", "max_tokens",
                                   "tokenizer", "cls_token_id")} == {
        "embed_dim": 16, "num_fusion_layers": FUSION, "video_width": VIDEO_WIDTH, "dual_cls": True,
        "max_tokens": 128, "tokenizer": tok_dir, "cls_token_id": 2}
    # the layout WeightsOnlyCheckpointHook writes: weights under text_encoder., architecture in meta
    ckpt = tmp_path / "epoch_1.pth"
    torch.save({"meta": {"vlr_text_encoder": config},
                "state_dict": {f"text_encoder.{k}": v for k, v in enc.state_dict().items()}}, ckpt)
    back = load_text_encoder(ckpt)
    assert type(back) is DualCLSTextEncoder and back.mlm_head.predictions.decoder.weight is \
        back.bert.embeddings.word_embeddings.weight
    b = batch(tok)
    with torch.no_grad():
        for view in (0, 1):
            view_ids = torch.full((3,), view)
            assert torch.equal(back(b["input_ids"], b["attention_mask"], view_ids),
                               enc(b["input_ids"], b["attention_mask"], view_ids))


def test_from_a_pretrained_bert_folder(tok, tmp_path):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    bert = BertForMaskedLM(BertConfig(**bert_config(tok)))
    with torch.no_grad():
        bert.cls.predictions.bias.normal_()  # a trained head: not the zeros a new one starts with
    bert.save_pretrained(tmp_path / "bert")
    tok.save_pretrained(tmp_path / "bert")

    enc = DualCLSTextEncoder(pretrained=str(tmp_path / "bert"), embed_dim=16, num_fusion_layers=FUSION).eval()
    assert enc.tokenizer_path == str(tmp_path / "bert") and enc.video_width == HIDDEN
    mine = enc.state_dict()
    for key, value in bert.state_dict().items():
        ours = key.replace("cls.", "mlm_head.", 1) if key.startswith("cls.") else key
        assert torch.equal(mine[ours], value), key
    assert torch.equal(enc.cls_embeddings[1], bert.bert.embeddings.word_embeddings.weight[tok.cls_token_id])
    shape = DualCLSTextEncoder.describe(pretrained=str(tmp_path / "bert"), embed_dim=16, num_fusion_layers=FUSION)
    assert (shape.max_positions, shape.embed_dim, shape.vocab_size) == (160, 16, len(tok))
    with pytest.raises(MissingFileError, match="model.pretrained: no such folder"):
        DualCLSTextEncoder(pretrained=str(tmp_path / "nothing"))


def test_what_no_encoder_is_built_from(tok, tok_dir):
    with pytest.raises(ValueError, match="exactly one of pretrained= or config="):
        DualCLSTextEncoder()
    with pytest.raises(ConfigError, match=r"num_fusion_layers must be an int in 0..2 .*found 3"):
        make(tok, tok_dir, num_fusion_layers=3)
    with pytest.raises(ConfigError, match=r"max_tokens must be an int in 2..160 .*found 200"):
        DualCLSTextEncoder.describe(config=bert_config(tok), num_fusion_layers=FUSION, max_tokens=200)
    with pytest.raises(ConfigError, match="add_cross_attention must be false"):
        DualCLSTextEncoder(config={**bert_config(tok), "is_decoder": True, "add_cross_attention": True},
                           cls_token_id=2)
    with pytest.raises(ValueError, match="needs cls_token_id= or tokenizer="):
        DualCLSTextEncoder(config=bert_config(tok), num_fusion_layers=FUSION)
    with pytest.raises(ConfigError, match="cls_token_id 99 is outside the vocabulary"):
        DualCLSTextEncoder(config=bert_config(tok), num_fusion_layers=FUSION, cls_token_id=99)
    enc = make(tok, tok_dir)
    with pytest.raises(ValueError, match="unknown view 'short'; the views are summary, detailed"):
        enc.encode_text(TEXTS, view="short")
    b = batch(tok)
    with pytest.raises(ValueError, match=r"view_ids must be \(3,\) integers in 0..1"):
        enc(b["input_ids"], b["attention_mask"], torch.tensor([0, 2, 1]))
    with pytest.raises(ValueError, match=r"view_ids must be \(3,\) integers"):
        enc(b["input_ids"], b["attention_mask"], torch.zeros(2, dtype=torch.long))


def test_vlr_eval_encodes_a_benchmark_in_the_protocol_s_view(tok, tok_dir):
    from vlr_plugins.eval.encode import encode_texts

    enc = make(tok, tok_dir)
    set_detailed_cls_apart(enc)
    batch = tok(TEXTS, truncation=True, max_length=128, padding=True, return_tensors="pt")
    with torch.no_grad():
        summary = enc.encode(batch["input_ids"], batch["attention_mask"], torch.zeros(3, dtype=torch.long)).embeds
        detailed = enc.encode(batch["input_ids"], batch["attention_mask"], torch.ones(3, dtype=torch.long)).embeds
    got = encode_texts(enc, tok, TEXTS, 128, view="detailed", progress=False)
    torch.testing.assert_close(got, detailed, atol=1e-6, rtol=0)
    torch.testing.assert_close(encode_texts(enc, tok, TEXTS, 128, progress=False), summary, atol=1e-6, rtol=0)
    assert not torch.allclose(got, summary)
