"""Tiny random exports of three kinds (open_clip, BLIP paragraph text tower, EOL embedder) for the MTEB tests."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("mteb")

TINY_OPEN_CLIP_NAME = "vlr-mteb-tiny"
WORDS = ("a an the red green blue white black small large old young dog cat bird horse car bus boat train man "
         "woman child people street beach field road water grass tree house sky park sits runs stands holds "
         "rides walks near on in under with of two three and").split()


@pytest.fixture(scope="session")
def open_clip_export(tmp_path_factory):
    """``vlr export open_clip:...`` of a random tiny CLIP (16-d, 77 text positions)."""
    open_clip = pytest.importorskip("open_clip")
    import torch
    from _tiny_towers import TINY_OPEN_CLIP

    from vlr_plugins.cli import main

    root = tmp_path_factory.mktemp("mteb-open-clip")
    (root / f"{TINY_OPEN_CLIP_NAME}.json").write_text(json.dumps(TINY_OPEN_CLIP))
    open_clip.add_model_config(root / f"{TINY_OPEN_CLIP_NAME}.json")
    torch.manual_seed(0)
    torch.save({"epoch": 1, "state_dict": open_clip.create_model(TINY_OPEN_CLIP_NAME).state_dict()}, root / "e.pt")
    assert main(["export", f"open_clip:{TINY_OPEN_CLIP_NAME}:{root / 'e.pt'}", str(root / "clip-export")]) == 0
    return root / "clip-export"


@pytest.fixture(scope="session")
def blip_export(tmp_path_factory):
    """A ``vlr_blip_text_encoder`` export of a random tiny BlipTextEncoder, caption budget 12 tokens."""
    pytest.importorskip("transformers")
    import torch

    from vlr_plugins.hf import export_text_encoder
    from vlr_plugins.text import BlipTextEncoder, build_wordpiece_tokenizer

    root = tmp_path_factory.mktemp("mteb-blip")
    tok = build_wordpiece_tokenizer(WORDS)
    tok.save_pretrained(root / "tokenizer")
    config = dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=64, max_position_embeddings=64, initializer_range=0.5,
                  pad_token_id=tok.pad_token_id, bos_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id)
    torch.manual_seed(0)
    encoder = BlipTextEncoder(config=config, embed_dim=16, tokenizer=str(root / "tokenizer")).eval()
    return export_text_encoder(encoder, root / "blip-export", token_budgets={"caption": 12, "paragraph": 20},
                               recipe="C5")


@pytest.fixture(scope="session")
def eol_base(tmp_path_factory):
    pytest.importorskip("torchvision")  # Qwen2-VL's video processor
    from _tiny_mllm import save_tiny_qwen2vl

    return save_tiny_qwen2vl(tmp_path_factory.mktemp("mteb-eol-base") / "tiny-qwen2vl", seed=3)


@pytest.fixture(scope="session")
def eol_embedder(eol_base):
    from vlr_plugins.mllm import EOLEmbedder

    return EOLEmbedder(eol_base, prompt="care", num_frames=4, frame_strategy="uniform")


@pytest.fixture(scope="session")
def eol_export(eol_embedder, tmp_path_factory):
    """An EOL (CaRe-prompt) export of a random tiny Qwen2-VL that samples 4 frames per clip."""
    from vlr_plugins.hf.export_eol import export_eol_embedder

    return export_eol_embedder(eol_embedder, tmp_path_factory.mktemp("mteb-eol") / "care-export",
                               recipe="care/stage2_paper")
