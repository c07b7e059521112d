"""A tiny random Qwen2-VL (and Qwen2 LM) for the tests: the models are the package's
(:mod:`vlr_plugins.mllm.tiny`, which users run too); the clips and NLI files the tests write are
here (tests/_support is on pytest's ``pythonpath``).
"""

from __future__ import annotations

from pathlib import Path

import torch

from vlr_plugins.mllm.tiny import (  # noqa: F401  (re-exported for the tests)
    MAX_PIXELS,
    QWEN_CHAT,
    SPECIAL,
    VLLM_SIZED,
    byte_tokenizer,
    save_model_folder,
    save_tiny_qwen2vl,
    tiny_processor,
    tiny_qwen2_lm,
    tiny_qwen2vl,
    tiny_qwen2vl_config,
)


def clip(num_frames: int = 4, height: int = 56, width: int = 56, seed: int = 0) -> torch.Tensor:
    """Random uint8 frames ``(T, 3, H, W)``."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (num_frames, 3, height, width), generator=g, dtype=torch.uint8)


def write_clip(path, num_frames: int = 12, height: int = 56, width: int = 56) -> str:
    """A lossless FFV1 video whose frame k is filled with the value 10 * k (decodes exactly)."""
    import av
    import numpy as np

    with av.open(str(path), "w") as container:
        stream = container.add_stream("ffv1", rate=8)
        stream.width, stream.height, stream.pix_fmt = width, height, "bgr0"
        for k in range(num_frames):
            frame = np.full((height, width, 3), 10 * k, np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return str(path)


def write_captioned_clips(root, captions) -> str:
    """Two clips (``a.mkv``: 8 frames 32x32, ``b.mkv``: 12 frames 32x48) in ``root`` and a
    stage-I captions file ``caps.jsonl`` pairing each caption with them in turn; its path."""
    import json

    root = Path(root)
    write_clip(root / "a.mkv", num_frames=8, height=32, width=32)
    write_clip(root / "b.mkv", num_frames=12, height=32, width=48)
    path = root / "caps.jsonl"
    path.write_text("".join(json.dumps({"video": "ab"[i % 2] + ".mkv", "caption": c}) + "\n"
                            for i, c in enumerate(captions)))
    return str(path)


NLI_WORDS = "a dog cat man woman runs sits jumps on the grass snow table quickly slowly red blue".split()


def write_nli_csv(path, rows: int = 20, seed: int = 0) -> str:
    """A SimCSE-style NLI file (``sent0, sent1, hard_neg``) of random six-word sentences; its path."""
    import csv

    g = torch.Generator().manual_seed(seed)

    def sentence() -> str:
        return " ".join(NLI_WORDS[int(i)] for i in torch.randint(len(NLI_WORDS), (6,), generator=g))

    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["sent0", "sent1", "hard_neg"])
        w.writerows([sentence(), sentence(), sentence()] for _ in range(rows))
    return str(path)
