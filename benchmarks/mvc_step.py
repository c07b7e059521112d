"""Benchmark: samples/s of one MVC training step of a tiny model, with and without video-token
dropping, with a trainable and a frozen video tower.

    python benchmarks/mvc_step.py              # ~1-2 min on 2 busy cores
    python benchmarks/mvc_step.py --json out.json

One step is what MMEngine's Runner does per batch of ``VideoTextPretrainingModel``: the video
tower on B clips, the dual-CLS text encoder on 2B captions (one summary, one detailed per
clip), VTC + VTM (hard negatives) + MLM, backward, AdamW. The clips are random tensors
(decoding is benchmarks/video_decode.py's subject), the captions random token ids. Every
configuration runs ``--warmup`` steps, then the best of ``--repeat`` rounds of ``--steps``
steps (each round times every configuration in turn); samples/s is clips per second. Ratios are to the trainable tower without dropping,
measured in the same run (absolute rates on a shared machine are noisy; ratios less so).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from vlr_plugins.integrations.mmengine.mvc_model import VideoTextPretrainingModel
from vlr_plugins.losses import VideoTextPretrainingLoss
from vlr_plugins.text import DualCLSTextEncoder
from vlr_plugins.vision import SpaceTimeViT

VOCAB = 1000
CONFIGS = [("trainable, no dropping", 0.0, True), ("trainable, drop 10%", 0.1, True),
           ("trainable, drop 50%", 0.5, True), ("frozen, no dropping", 0.0, False),
           ("frozen, drop 50%", 0.5, False)]


def build(drop: float, trainable: bool, args: argparse.Namespace) -> VideoTextPretrainingModel:
    torch.manual_seed(0)
    text = DualCLSTextEncoder(config=dict(vocab_size=VOCAB, hidden_size=args.width, num_hidden_layers=3,
                                          num_attention_heads=4, intermediate_size=4 * args.width,
                                          max_position_embeddings=64),
                              embed_dim=64, num_fusion_layers=1, video_width=args.width, max_tokens=48,
                              cls_token_id=2)
    tower = SpaceTimeViT(num_frames=args.frames, image_size=args.size, patch_size=16, tubelet_size=2,
                         width=args.width, depth=args.depth, num_heads=4, pool_norm=True, embed_dim=64,
                         token_drop_ratio=drop)
    loss = VideoTextPretrainingLoss(VOCAB, mask_id=3, special_ids=[0, 1, 2, 3])
    return VideoTextPretrainingModel(text, tower, loss, freeze_video=not trainable)


def stepper(model: VideoTextPretrainingModel, args: argparse.Namespace):
    """One training step of ``model`` on a fixed random batch, as a function."""
    b = args.batch
    batch = dict(frames=torch.randn(b, args.frames, 3, args.size, args.size),
                 input_ids=torch.randint(4, VOCAB, (2 * b, 32)), attention_mask=torch.ones(2 * b, 32, dtype=torch.long),
                 text_owner=torch.arange(b).repeat(2), text_view=torch.arange(2).repeat_interleave(b))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    model.train()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        model(**batch, mode="loss")["loss"].backward()
        opt.step()

    return step


def rates(args: argparse.Namespace) -> list[float]:
    """samples/s per configuration: the best of ``repeat`` rounds, each round timing every
    configuration in turn (so a change in the machine's load falls on all of them)."""
    steps = [stepper(build(drop, trainable, args), args) for _, drop, trainable in CONFIGS]
    for step in steps:
        for _ in range(args.warmup):
            step()
    best = [float("inf")] * len(steps)
    for _ in range(args.repeat):
        for i, step in enumerate(steps):
            start = time.perf_counter()
            for _ in range(args.steps):
                step()
            best[i] = min(best[i], time.perf_counter() - start)
    return [args.steps * args.batch / t for t in best]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json")
    args = p.parse_args()
    tokens = (args.frames // 2) * (args.size // 16) ** 2
    print(f"tiny MVC step: batch {args.batch}, {args.frames} frames at {args.size} ({tokens} video tokens), "
          f"towers width {args.width}, video depth {args.depth}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    rows = [{"config": name, "token_drop_ratio": drop, "trainable_video": trainable, "samples_per_s": r}
            for (name, drop, trainable), r in zip(CONFIGS, rates(args))]
    base = rows[0]["samples_per_s"]
    print("| configuration | samples/s | vs trainable, no dropping |\n|---|---|---|")
    for r in rows:
        r["ratio"] = r["samples_per_s"] / base
        print(f"| {r['config']} | {r['samples_per_s']:.1f} | {r['ratio']:.2f}x |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
