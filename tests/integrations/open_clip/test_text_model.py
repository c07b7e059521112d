"""open_clip and Long-CLIP checkpoints as text models: open_clip's own encoding at its context
length or cut to a budget, long-context (-ctx) names stretched the Long-CLIP way, and what is
refused before a model is built."""

from __future__ import annotations

import json

import pytest
import torch

open_clip = pytest.importorskip("open_clip")

from _video_world import TINY_CLIP, load_tiny_open_clip, save_tiny_open_clip  # noqa: E402

from vlr_plugins.errors import ConfigError, MissingFileError, ModelLoadError, UsageError  # noqa: E402
from vlr_plugins.integrations.open_clip.text_model import OpenCLIPTextModel  # noqa: E402
from vlr_plugins.specs import load_text_model  # noqa: E402

TEXTS = ["a dog runs along the beach", "two people fold towels in a bright room while talking about dinner"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return save_tiny_open_clip(tmp_path_factory.mktemp("tiny-clip"))


def test_texts_are_encoded_as_open_clip_encodes_them(tiny):
    text_model = load_text_model(f"open_clip:local-dir:{tiny}")
    model, tokenizer = load_tiny_open_clip(tiny)
    with torch.no_grad():
        expected = model.encode_text(tokenizer(TEXTS))
    assert text_model.max_positions == 24 and text_model.embed_dim == 32
    assert torch.allclose(text_model.encode_text(TEXTS), expected, atol=1e-6)


def test_a_budget_cuts_the_texts_and_pads_back_to_the_context(tiny):
    text_model = load_text_model(f"open_clip:local-dir:{tiny}")
    model, tokenizer = load_tiny_open_clip(tiny)
    tokens = tokenizer(TEXTS, context_length=6)  # start, 4 words, end
    assert tokens[1, 5] == tokenizer.eot_token_id
    padded = torch.zeros(2, 24, dtype=tokens.dtype)
    padded[:, :6] = tokens
    with torch.no_grad():
        expected = model.encode_text(padded)
    assert torch.allclose(text_model.encode_text(TEXTS, max_tokens=6), expected, atol=1e-6)
    with pytest.raises(ValueError, match="40 tokens exceed its 24 positions"):
        text_model.encode_text(TEXTS, max_tokens=40)


def test_a_local_dir_folder_takes_a_trained_checkpoint(tiny, tmp_path):
    # open_clip ignores `pretrained` for a local-dir: name; the spec's checkpoint replaces the folder's weights
    torch.manual_seed(2)
    trained = open_clip.create_model(f"local-dir:{tiny}", load_weights=False).eval()
    torch.save({"epoch": 1, "state_dict": {f"module.{k}": v for k, v in trained.state_dict().items()}},
               tmp_path / "epoch_1.pt")
    text_model = load_text_model(f"open_clip:local-dir:{tiny}:{tmp_path / 'epoch_1.pt'}")
    own = load_text_model(f"open_clip:local-dir:{tiny}")
    tokens = open_clip.get_tokenizer(f"local-dir:{tiny}")(TEXTS)
    with torch.no_grad():
        expected = trained.encode_text(tokens)
    assert torch.allclose(text_model.encode_text(TEXTS), expected, atol=1e-6)
    assert not torch.allclose(own.encode_text(TEXTS), expected, atol=1e-3)


def test_a_long_context_name_stretches_a_short_checkpoint_the_long_clip_way(tmp_path):
    # a base config registered under its own name, and a 24-position checkpoint of it
    config = tmp_path / "configs" / "vlr-test-tinyclip.json"
    config.parent.mkdir()
    config.write_text(json.dumps(TINY_CLIP))
    open_clip.add_model_config(config)
    torch.manual_seed(1)
    source = open_clip.create_model("vlr-test-tinyclip")
    torch.save(source.state_dict(), tmp_path / "short.pt")

    long = load_text_model(f"open_clip:vlr-test-tinyclip-ctx40:{tmp_path / 'short.pt'}")
    assert long.max_positions == 40 and long.tokenizer.context_length == 40
    table = long.model.positional_embedding.detach()
    assert table.shape[0] == 40 and torch.equal(table[:20], source.positional_embedding.detach()[:20])
    # a text shorter than the 20 kept positions is embedded as the source embeds it
    with torch.no_grad():
        expected = source.eval().encode_text(open_clip.get_tokenizer("vlr-test-tinyclip")(["a dog"]))
    assert torch.allclose(long.encode_text(["a dog"]), expected, atol=1e-5)


def test_a_pretrained_tag_that_is_not_downloaded_is_one_model_load_error(tmp_path, monkeypatch):
    import huggingface_hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ModelLoadError) as e:
        load_text_model("open_clip:ViT-B-32:openai")
    message = str(e.value)
    assert message.startswith("--model: cannot load 'ViT-B-32:openai'") and "docs/quickstart.md" in message


@pytest.mark.parametrize("spec, error, message", [
    ("ViT-B-32", UsageError, "expected open_clip:MODEL:CHECKPOINT_OR_TAG"),
    ("ViT-B-33:openai", UsageError, "open_clip has no model 'ViT-B-33'; did you mean ViT-B-32"),
    ("ViT-B-32:openia", UsageError, "'openia' is neither a checkpoint file nor a pretrained tag of ViT-B-32"),
    ("ViT-B-32:weights/epoch_3.pt", MissingFileError, "no checkpoint at weights/epoch_3.pt"),
    ("local-dir:", UsageError, "needs a Hub id or a folder"),
])
def test_what_is_refused_before_a_model_is_built(spec, error, message):
    with pytest.raises(error, match=message):
        load_text_model(f"open_clip:{spec}")


def test_a_checkpoint_of_another_architecture_names_both(tmp_path):
    config = tmp_path / "vlr-test-wideclip.json"
    config.write_text(json.dumps({**TINY_CLIP, "embed_dim": 16}))
    open_clip.add_model_config(config)
    torch.save(open_clip.create_model("vlr-test-wideclip").state_dict(), tmp_path / "wide.pt")
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "vlr-test-tinyclip2.json").write_text(json.dumps(TINY_CLIP))
    open_clip.add_model_config(tmp_path / "tiny")
    with pytest.raises(ConfigError, match=r"wide.pt does not hold weights of open_clip model vlr-test-tinyclip2"):
        load_text_model(f"open_clip:vlr-test-tinyclip2:{tmp_path / 'wide.pt'}")


def test_an_open_clip_model_is_a_text_model():
    model = open_clip.CLIP(**TINY_CLIP)
    wrapped = OpenCLIPTextModel(model, open_clip.get_tokenizer("ViT-B-32", context_length=24), name="tiny")
    assert wrapped.encode_text(TEXTS).shape == (2, 32) and wrapped.name == "tiny"


def test_a_long_clip_checkpoint_embeds_texts_as_long_clip_encode_text_does(tmp_path):
    # Long-CLIP's released layout: a plain state dict with positional_embedding and positional_embedding_res
    from _long_clip import long_clip_encode_text, register_tiny_long_clip, save_long_clip_checkpoint

    base = register_tiny_long_clip(tmp_path / "configs", "vlr-test-longclip-eval")
    state = save_long_clip_checkpoint(tmp_path / "longclip-tiny.pt")
    text_model = load_text_model(f"open_clip:{base}-ctx248:{tmp_path / 'longclip-tiny.pt'}")
    assert text_model.max_positions == 248 and text_model.tokenizer.context_length == 248
    texts = [TEXTS[0], TEXTS[1] + " and about the weather of tomorrow morning",
             " ".join(["a long caption of words"] * 20)]
    tokens = open_clip.get_tokenizer(base, context_length=248)(texts)  # Long-CLIP's tokenizer: CLIP's BPE at 248
    ends = tokens.argmax(dim=1).tolist()
    assert ends[0] < 20 <= ends[1] < 77 < ends[2], "end tokens before row 20, after it, and past CLIP's 77"
    expected = long_clip_encode_text(state, tokens, heads=2)
    torch.testing.assert_close(text_model.encode_text(texts).double(), expected, rtol=1e-5, atol=1e-5)


def test_a_long_clip_checkpoint_under_a_short_name_is_one_error_naming_the_long_name(tmp_path):
    from _long_clip import register_tiny_long_clip, save_long_clip_checkpoint

    base = register_tiny_long_clip(tmp_path / "configs", "vlr-test-longclip-short")
    save_long_clip_checkpoint(tmp_path / "longclip-tiny.pt")
    with pytest.raises(ConfigError, match=rf"--model: {tmp_path}/longclip-tiny.pt is a Long-CLIP checkpoint "
                                          rf"\(key 'positional_embedding_res'.*give open_clip:{base}-ctx248:"):
        load_text_model(f"open_clip:{base}:{tmp_path / 'longclip-tiny.pt'}")
