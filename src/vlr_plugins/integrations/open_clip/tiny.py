"""A tiny random CLIP as an open_clip ``local-dir:`` folder, for trying ``vlr openclip-train``
and the ``open_clip:`` commands offline on a CPU. Nothing is downloaded: open_clip's own
``CLIP`` class at ~1.6M parameters (a 1-block ViT of width 32 on 32 x 32 pictures, a 1-block
text transformer of width 32 over open_clip's 77-token BPE tokenizer, 16-d embeddings) with
random weights; what it embeds is noise until trained, and a few steps leave it near chance.

    python -m vlr_plugins.integrations.open_clip.tiny tiny-clip      # writes the folder
    vlr openclip-train --model local-dir:tiny-clip ...                # docs/open_clip.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["TINY_CLIP", "main", "write_local_dir_model"]

#: open_clip's ``model_cfg`` of a ~1.6M-parameter CLIP (77 text positions)
TINY_CLIP: dict[str, Any] = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}
#: the folder's ``preprocess_cfg``: the config's image size, a CLIP-like normalisation
_MEAN, _STD = [0.48, 0.46, 0.41], [0.27, 0.26, 0.28]


def write_local_dir_model(folder: str | Path, config: dict | None = None, seed: int = 0) -> Path:
    """``folder`` (created) with ``open_clip_config.json`` and the random weights of
    ``open_clip.CLIP(**config)`` (default :data:`TINY_CLIP`, seeded by ``seed``) as
    ``open_clip_model.safetensors``: ``open_clip.create_model_and_transforms(f"local-dir:{folder}")``
    loads it. Returns the folder."""
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
        "preprocess_cfg": {"size": config["vision_cfg"]["image_size"], "mean": _MEAN, "std": _STD}}))
    save_file(model.state_dict(), folder / "open_clip_model.safetensors")
    return folder


def main(argv: list[str] | None = None) -> int:
    """``python -m vlr_plugins.integrations.open_clip.tiny OUT [--seed S]``."""
    from vlr_plugins._io import staged_dir

    parser = argparse.ArgumentParser(prog="python -m vlr_plugins.integrations.open_clip.tiny",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the folder to write (must not exist, or be empty)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the random weights (default 0)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        print(f"error: {out}: already there (and not an empty folder); give a new folder", file=sys.stderr)
        return 2
    with staged_dir(out) as tmp:  # nothing half-written if it fails
        write_local_dir_model(tmp, seed=args.seed)
    print(f"wrote a random tiny CLIP to {out}: --model local-dir:{out} in vlr openclip-train, "
          f"open_clip:local-dir:{out} in vlr eval / precompute")
    return 0


if __name__ == "__main__":
    sys.exit(main())
