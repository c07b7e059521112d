"""A tiny MVC video world and the ``--set`` overrides that shrink an MVC recipe to it, shared
by the MVC tests (data, recipes, MMEngine training, the bad-input catalogue).

The world is written once per test session (8 training clips of 8 frames at 32 x 32, 4
held-out ones); :func:`tiny_sets` makes ``mvc/mvc_b`` train a 2-layer 32-wide video tower and
a 2-layer 32-wide dual-CLS BERT on it, 4 frames a clip, in a few seconds a step on a CPU.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

#: the tiny towers' joint embedding width
EMBED_DIM = 16


def _session_dir(prefix: str) -> Path:
    """A temporary folder removed when the test session's process exits."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@functools.lru_cache(maxsize=1)
def mvc_world() -> dict[str, str]:
    """Paths of the session's tiny world (``train``, ``videos``, ``tokenizer``, ``eval_videos``,
    ``eval_summary``, ``eval_detailed``) plus ``vocab`` (the tokenizer's size, as a string)."""
    from vlr_plugins.demo.synthetic_video_world import SyntheticVideoWorld, SyntheticVideoWorldConfig

    world = SyntheticVideoWorld(SyntheticVideoWorldConfig(seed=3, num_train=8, num_eval=4))
    paths = world.write(_session_dir("vlr-mvc-world-"))
    return {**{k: str(v) for k, v in paths.items()}, "vocab": str(len(world.tokenizer()))}


def tiny_sets(world: dict[str, str], *, dual_cls: bool = True, frames: int = 4, batch_size: int = 4,
              epochs: int = 1) -> list[str]:
    """``--set`` items that shrink an MVC recipe to the tiny world (random weights, no SMILE
    checkpoint, 4 frames of 32 x 32, 64-token views, no workers)."""
    bert = (f"{{vocab_size: {world['vocab']}, hidden_size: 32, num_hidden_layers: 2, num_attention_heads: 2, "
            "intermediate_size: 64, max_position_embeddings: 96}")
    return [
        f"model={{type: DualCLSTextEncoder, pretrained: null, config: {bert}, num_fusion_layers: 1, "
        f"embed_dim: {EMBED_DIM}, dual_cls: {str(dual_cls).lower()}, max_tokens: 64, tokenizer: {world['tokenizer']}}}",
        "video.encoder={type: SpaceTimeViT, patch_size: 16, tubelet_size: 2, width: 32, depth: 2, num_heads: 2, "
        f"pool_norm: true, embed_dim: {EMBED_DIM}, token_drop_ratio: 0.1}}",
        "video.checkpoint=null", f"video.frames={frames}", "video.image_size=32",
        "text_views.positives=[{name: summary, field: [O, S1, S2], take: random, count: 1, max_tokens: 64}, "
        "{name: detailed, field: [D1*, D2*, P1, P2], take: random, count: 1, max_tokens: 64}]",
        f"train.batch_size={batch_size}", f"train.epochs={epochs}", "train.num_workers=0", "train.log_interval=1",
    ]


@functools.lru_cache(maxsize=1)
def mvc_run() -> Path:
    """The work dir of one ``vlr train mvc/mvc_b`` run on the tiny world, once per session:
    one epoch of 8 clips in batches of 4 (2 steps), ``epoch_1.pth`` in it."""
    from vlr_plugins.cli import main

    world = mvc_world()
    work = _session_dir("vlr-mvc-run-") / "run"
    code = main(["train", "mvc/mvc_b", "--train", world["train"], "--work-dir", str(work), "--set", *tiny_sets(world)])
    assert code == 0, f"vlr train mvc/mvc_b exited {code}"
    return work
