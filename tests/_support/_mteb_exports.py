"""Tiny random exports for the MTEB tests: an open_clip folder and a text-tower BLIP folder, built in ``root``."""

from __future__ import annotations

import json
from pathlib import Path

TINY_OPEN_CLIP_NAME = "vlr-mteb-tiny"
WORDS = ("a an the red green blue white black small large old young dog cat bird horse car bus boat train man "
         "woman child people street beach field road water grass tree house sky park sits runs stands holds "
         "rides walks near on in under with of two three and").split()


def open_clip_export(root: Path) -> Path:
    """``vlr export open_clip:...`` of a random tiny CLIP (16-d, 77 text positions): ``root/clip-export``."""
    import open_clip
    import torch
    from _tiny_towers import TINY_OPEN_CLIP

    from vlr_plugins.cli import main

    (root / f"{TINY_OPEN_CLIP_NAME}.json").write_text(json.dumps(TINY_OPEN_CLIP))
    open_clip.add_model_config(root / f"{TINY_OPEN_CLIP_NAME}.json")
    torch.manual_seed(0)
    torch.save({"epoch": 1, "state_dict": open_clip.create_model(TINY_OPEN_CLIP_NAME).state_dict()}, root / "e.pt")
    assert main(["export", f"open_clip:{TINY_OPEN_CLIP_NAME}:{root / 'e.pt'}", str(root / "clip-export")]) == 0
    return root / "clip-export"


def blip_export(root: Path, *, image_side: bool = False) -> Path:
    """A ``vlr_blip_text_encoder`` export of a random tiny BlipTextEncoder (budgets: caption 12, paragraph 20);
    with ``image_side``, a tiny BLIP's frozen image side bundled beside it."""
    import torch

    from vlr_plugins.hf import export_text_encoder
    from vlr_plugins.text import BlipTextEncoder, build_wordpiece_tokenizer

    tok = build_wordpiece_tokenizer(WORDS)
    tok.save_pretrained(root / "tokenizer")
    config = dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=64, max_position_embeddings=64, initializer_range=0.5,
                  pad_token_id=tok.pad_token_id, bos_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id)
    torch.manual_seed(0)
    encoder = BlipTextEncoder(config=config, embed_dim=16, tokenizer=str(root / "tokenizer")).eval()
    towers = {}
    if image_side:
        from _blip_world import save_tiny_blip

        from vlr_plugins.precompute.images import BlipImageEncoder

        towers["image_side"] = BlipImageEncoder(save_tiny_blip(root / "blip"))
    return export_text_encoder(encoder, root / "blip-export", token_budgets={"caption": 12, "paragraph": 20},
                               recipe="C5", **towers)


def mvc_export(root: Path) -> Path:
    """``vlr export`` of a tiny MVC checkpoint (dual-CLS text encoder + its trained SpaceTimeViT, 4 frames)."""
    from _tiny_mvc import save_checkpoint, text_encoder, trained_tower

    from vlr_plugins.hf import export_text_encoder
    from vlr_plugins.text import build_wordpiece_tokenizer

    tok = build_wordpiece_tokenizer(WORDS)
    tok.save_pretrained(root / "tokenizer")
    tower = trained_tower()
    ckpt = save_checkpoint(root / "epoch_1.pth", text_encoder(tok, root / "tokenizer", tower.width), tower)
    return export_text_encoder(ckpt, root / "mvc-export")
