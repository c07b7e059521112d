"""Tiny BLIP pieces for the export tests: a ``BlipForImageTextRetrieval`` folder as
``save_pretrained`` writes it, a BLIP text encoder, and a ``vlr train`` checkpoint of it whose
recipe trained against an image-embedding store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def save_tiny_blip(folder: str | Path, *, proj: int = 16, processor: bool = True, seed: int = 1) -> Path:
    """A random ``BlipForImageTextRetrieval`` (32-wide, 32-px images, ``vision_proj`` into ``proj``
    dimensions) saved into ``folder`` with its ``BlipImageProcessor`` (unless ``processor`` is False)."""
    from transformers import BlipConfig, BlipForImageTextRetrieval, BlipImageProcessor

    config = BlipConfig(
        text_config=dict(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=1,
                         num_attention_heads=2, max_position_embeddings=64, bos_token_id=1, sep_token_id=3),
        # BLIP's vision default initializer_range (1e-10) would make every image look alike
        vision_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2,
                           image_size=32, patch_size=16, initializer_range=0.02),
        image_text_hidden_size=proj,
    )
    torch.manual_seed(seed)
    folder = Path(folder)
    BlipForImageTextRetrieval(config).save_pretrained(folder)
    if processor:
        BlipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def tiny_blip_text_encoder(tokenizer: Any, tokenizer_dir: str | Path, *, seed: int = 0) -> Any:
    """A random 16-d ``BlipTextEncoder`` over ``tokenizer`` (saved at ``tokenizer_dir``), in eval mode."""
    from vlr_plugins.text import BlipTextEncoder

    config = dict(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                  intermediate_size=64, max_position_embeddings=160, initializer_range=0.5,
                  pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.cls_token_id,
                  sep_token_id=tokenizer.sep_token_id)
    torch.manual_seed(seed)
    return BlipTextEncoder(config=config, embed_dim=16, tokenizer=str(tokenizer_dir)).eval()


def paragraph_checkpoint(path: str | Path, encoder: Any, store: str | None) -> Path:
    """``path``: the checkpoint ``WeightsOnlyCheckpointHook`` writes for ``encoder`` trained with
    paragraph/c5 against the image-embedding store ``store`` (none when ``None``)."""
    from vlr_plugins.recipe import load_recipe

    data = {"train": "samples.jsonl", **({"image_embeddings": store} if store else {})}
    recipe = load_recipe("paragraph/c5", {"data": data}).to_dict()
    torch.save({"meta": {"vlr_text_encoder": encoder.to_config(), "vlr_recipe": recipe},
                "state_dict": {f"text_encoder.{k}": v for k, v in encoder.state_dict().items()}}, path)
    return Path(path)
