"""BlipTextEncoder: the text half of BLIP's retrieval model, from a checkpoint or a config."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from vlr_plugins.registry import MODELS  # noqa: E402
from vlr_plugins.text import BlipTextEncoder, build_wordpiece_tokenizer  # noqa: E402

VOCAB = 99
MAX_POSITIONS = 64
TINY_TEXT = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                 intermediate_size=64, max_position_embeddings=MAX_POSITIONS,
                 pad_token_id=0, bos_token_id=2, sep_token_id=3)


@pytest.fixture(scope="module")
def blip_dir(tmp_path_factory) -> Path:
    """A tiny random BlipForImageTextRetrieval saved like a Hub checkpoint."""
    from transformers import BlipConfig, BlipForImageTextRetrieval

    config = BlipConfig(
        text_config={**TINY_TEXT, "initializer_range": 0.02},
        # BLIP's vision default initializer_range (1e-10) would make every image look alike
        vision_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=1,
                           num_attention_heads=2, image_size=32, patch_size=16,
                           initializer_range=0.02),
        image_text_hidden_size=16,
    )
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("tiny-blip")
    BlipForImageTextRetrieval(config).save_pretrained(out)
    return out


def _batch(n: int = 4, length: int = 9, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids starting with [CLS] (2); later rows padded (0) on the right."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (n, length), generator=g)
    ids[:, 0] = 2
    mask = torch.ones(n, length, dtype=torch.long)
    for row in range(1, n):
        mask[row, length - 2 * row:] = 0
    return ids.masked_fill(mask == 0, 0), mask


def test_pretrained_embeddings_are_the_text_side_of_blip_retrieval(blip_dir):
    from transformers import BlipForImageTextRetrieval

    full = BlipForImageTextRetrieval.from_pretrained(blip_dir).eval()
    enc = BlipTextEncoder(pretrained=str(blip_dir)).eval()
    ids, mask = _batch()

    with torch.no_grad():
        got = enc(ids, mask)
        # what BlipForImageTextRetrieval.forward(use_itm_head=False) does to the text
        hidden = full.text_encoder(input_ids=ids, attention_mask=mask)[0]
        expected = F.normalize(full.text_proj(hidden[:, 0, :]), dim=-1)

    assert got.shape == (4, 16) and enc.embed_dim == 16
    assert enc.max_positions == MAX_POSITIONS
    torch.testing.assert_close(got, expected)
    # random weights that do something: texts get different embeddings
    assert torch.cdist(got, got).fill_diagonal_(1.0).min() > 1e-3


def test_pretrained_scores_match_the_itc_score_of_blip(blip_dir):
    from transformers import BlipForImageTextRetrieval

    full = BlipForImageTextRetrieval.from_pretrained(blip_dir).eval()
    enc = BlipTextEncoder(pretrained=str(blip_dir)).eval()
    ids, mask = _batch(n=3)
    pixels = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))

    with torch.no_grad():
        itc = full(input_ids=ids, pixel_values=pixels, attention_mask=mask,
                   use_itm_head=False).itm_score
        image_tokens = full.vision_model(pixel_values=pixels).last_hidden_state
        image_feat = F.normalize(full.vision_proj(image_tokens[:, 0, :]), dim=-1)
        text_feat = enc(ids, mask)

    torch.testing.assert_close(itc, image_feat @ text_feat.T)


def test_pretrained_keeps_only_the_text_half(blip_dir):
    enc = BlipTextEncoder(pretrained=str(blip_dir))
    top = {name.split(".")[0] for name, _ in enc.named_parameters()}
    assert top == {"text_encoder", "text_proj"}


def test_from_config_gives_unit_rows_and_trains():
    torch.manual_seed(0)
    enc = BlipTextEncoder(config=TINY_TEXT, embed_dim=8)
    ids, mask = _batch(n=5)

    emb = enc(ids, mask)

    assert emb.shape == (5, 8)
    torch.testing.assert_close(emb.norm(dim=-1), torch.ones(5))
    # a contrastive-style objective: gradients reach the text transformer itself
    (emb @ emb.T).triu(1).sum().backward()
    for name in ("embeddings.word_embeddings.weight", "encoder.layer.0.attention.self.query.weight",
                 "encoder.layer.0.output.dense.weight"):
        grad = enc.text_encoder.get_parameter(name).grad
        assert grad is not None and grad.abs().sum() > 0, name
    assert enc.text_proj.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("kwargs", [{}, {"pretrained": "x", "config": TINY_TEXT}])
def test_exactly_one_of_pretrained_or_config(kwargs):
    with pytest.raises(ValueError, match="exactly one of pretrained= or config="):
        BlipTextEncoder(**kwargs)


def test_texts_longer_than_the_positions_are_refused():
    enc = BlipTextEncoder(config=TINY_TEXT, embed_dim=8)
    ids = torch.full((2, MAX_POSITIONS + 1), 7)
    with pytest.raises(ValueError, match=f"texts of {MAX_POSITIONS + 1} tokens exceed the "
                                         f"encoder's {MAX_POSITIONS} positions"):
        enc(ids, torch.ones_like(ids))
    # exactly at the limit is fine
    assert enc(ids[:, :MAX_POSITIONS], torch.ones_like(ids[:, :MAX_POSITIONS])).shape == (2, 8)


def test_load_tokenizer_from_the_folder_given(tmp_path):
    tok = build_wordpiece_tokenizer(["red", "car", "dog"], model_max_length=MAX_POSITIONS)
    tok.save_pretrained(tmp_path / "tok")
    enc = BlipTextEncoder(config=TINY_TEXT, embed_dim=8, tokenizer=str(tmp_path / "tok"))

    loaded = enc.load_tokenizer()

    assert loaded("a red dog.")["input_ids"] == tok("a red dog.")["input_ids"]
    assert loaded.get_vocab() == tok.get_vocab()


def test_load_tokenizer_without_one_is_an_error():
    with pytest.raises(ValueError, match="without tokenizer="):
        BlipTextEncoder(config=TINY_TEXT, embed_dim=8).load_tokenizer()


def test_pretrained_names_its_tokenizer_by_default(blip_dir):
    assert BlipTextEncoder(pretrained=str(blip_dir)).tokenizer_path == str(blip_dir)


def test_registered_and_buildable_by_name():
    assert MODELS.get("BlipTextEncoder") is BlipTextEncoder
    enc = MODELS.build({"type": "BlipTextEncoder", "config": TINY_TEXT, "embed_dim": 12})
    assert isinstance(enc, BlipTextEncoder) and enc.embed_dim == 12


def test_importing_the_text_package_does_not_import_transformers():
    code = ("import sys, vlr_plugins.text; "
            "print(sorted(m for m in ('transformers', 'tokenizers') if m in sys.modules))")
    src = Path(__file__).resolve().parents[2] / "src"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": str(src)},
    )
    assert out.stdout.strip() == "[]"


def test_describe_tells_what_the_arguments_build_without_weights(blip_dir):
    from vlr_plugins.text.blip_text_encoder import TextEncoderShape

    for kwargs in ({"pretrained": str(blip_dir)}, {"config": TINY_TEXT, "embed_dim": 24}):
        enc = BlipTextEncoder(**kwargs)
        shape = BlipTextEncoder.describe(**kwargs)
        assert shape == TextEncoderShape(enc.max_positions, enc.embed_dim, enc.text_encoder.config.vocab_size)


def test_describe_names_what_cannot_be_built(tmp_path, monkeypatch):
    from vlr_plugins.errors import ConfigError, MissingFileError, ModelLoadError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="not a multiple of num_attention_heads 5"):
        BlipTextEncoder.describe(config={**TINY_TEXT, "num_attention_heads": 5})
    with pytest.raises(ModelLoadError, match=r"^my.yaml: model.pretrained: cannot load 'someone/no-blip'"):
        BlipTextEncoder.describe(pretrained="someone/no-blip", setting="my.yaml: model.pretrained")
    with pytest.raises(MissingFileError, match="no such folder"):
        BlipTextEncoder.describe(pretrained=str(tmp_path / "absent"))
    with pytest.raises(ModelLoadError, match="holds no config.json"):
        BlipTextEncoder.describe(pretrained=str(tmp_path))


def test_a_pretrained_model_that_cannot_be_had_names_model_pretrained(monkeypatch):
    from vlr_plugins.errors import ModelLoadError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match=r"^model.pretrained: cannot load 'someone/no-blip'"):
        BlipTextEncoder(pretrained="someone/no-blip")
