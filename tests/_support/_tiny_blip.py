"""A tiny random BLIP retrieval model built from a config and saved as a folder (``blip:FOLDER``)."""

from __future__ import annotations

from pathlib import Path


def save_tiny_blip(out: Path) -> Path:
    """``BlipForImageTextRetrieval`` of 2 layers, 32 wide, 16-d projections, seed 0, and its
    image processor (32x32), saved in ``out``."""
    import torch
    from transformers import BlipConfig, BlipForImageTextRetrieval, BlipImageProcessor

    config = BlipConfig(
        text_config=dict(
            vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
            num_attention_heads=2, max_position_embeddings=64, bos_token_id=1, sep_token_id=3,
        ),
        # BLIP's vision default initializer_range (1e-10) would make every image look alike
        vision_config=dict(
            hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2,
            image_size=32, patch_size=16, initializer_range=0.02,
        ),
        image_text_hidden_size=16,
    )
    torch.manual_seed(0)
    BlipForImageTextRetrieval(config).save_pretrained(out)
    BlipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(out)
    return out
