"""A tiny random CLIP as an open_clip ``local-dir:`` folder (tests only)."""

from __future__ import annotations

import json
from pathlib import Path

#: open_clip's ``model_cfg`` of a ~1.6M-parameter CLIP (77 text positions)
TINY_CLIP = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


def write_local_dir_model(folder: str | Path, config: dict | None = None, seed: int = 0) -> Path:
    """``folder`` with ``open_clip_config.json`` and random ``open_clip_model.safetensors``:
    ``open_clip.create_model_and_transforms(f"local-dir:{folder}")`` loads it."""
    import open_clip
    import torch
    from safetensors.torch import save_file

    config = json.loads(json.dumps(config or TINY_CLIP))
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = open_clip.CLIP(**config)
    (folder / "open_clip_config.json").write_text(json.dumps({
        "model_cfg": config,
        "preprocess_cfg": {"size": config["vision_cfg"]["image_size"], "mean": [0.48, 0.46, 0.41],
                           "std": [0.27, 0.26, 0.28]}}))
    save_file(model.state_dict(), folder / "open_clip_model.safetensors")
    return folder
