"""Tiny pieces of an MVC run for the export tests: a dual-CLS text encoder, a trained-looking
``SpaceTimeViT`` and the checkpoint ``WeightsOnlyCheckpointHook`` writes for them."""

from __future__ import annotations

import json

import torch

from vlr_plugins.data.video import CLIP_MEAN, CLIP_STD

WIDTH, EMBED = 24, 16
BASE = dict(num_frames=4, image_size=32, patch_size=16, tubelet_size=2, width=WIDTH, depth=2, num_heads=2,
            embed_dim=EMBED, token_drop_ratio=0.1, image_mean=list(CLIP_MEAN), image_std=list(CLIP_STD))
# (height, width, frames): 48 x 53 resizes to 32 x 35, whose centre crop starts at round(1.5) = 2
# (transformers' own crop would start at int(1.5) = 1); a portrait clip; one shorter than 4 frames
VIDEOS = {"wide": (48, 53, 40), "tall": (64, 48, 30), "short": (48, 64, 3)}


def text_encoder(tokenizer, tokenizer_dir, video_width: int):
    """A random ``DualCLSTextEncoder`` (2 BERT layers, 1 of them fusion) over ``tokenizer``."""
    from vlr_plugins.text import DualCLSTextEncoder

    bert = dict(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=96, initializer_range=0.5,
                pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    return DualCLSTextEncoder(config=bert, embed_dim=EMBED, num_fusion_layers=1, video_width=video_width,
                              max_tokens=64, tokenizer=str(tokenizer_dir)).eval()


def trained_tower(**options):
    """A tower of ``BASE`` + ``options`` whose every weight moved off its initial value."""
    from vlr_plugins.vision import SpaceTimeViT

    torch.manual_seed(1)
    tower = SpaceTimeViT(**{**BASE, **options})
    with torch.no_grad():
        for p in tower.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return tower.eval()


def save_checkpoint(path, encoder, tower, *, video_meta=None, video_state=None) -> str:
    """The layout WeightsOnlyCheckpointHook writes for an MVC run."""
    meta = {"vlr_text_encoder": encoder.to_config(),
            "vlr_video_encoder": json.loads(json.dumps(tower.to_config())) if video_meta is None else video_meta}
    state = {f"text_encoder.{k}": v for k, v in encoder.state_dict().items()}
    state.update({f"video_encoder.{k}": v for k, v in (video_state or tower.state_dict()).items()})
    torch.save({"meta": meta, "state_dict": state}, path)
    return str(path)
