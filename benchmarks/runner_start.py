"""Benchmark: wall time of building MMEngine's runner and training one tiny epoch, with MMEngine's
own ``Runner.from_cfg`` and with ``vlr train``'s builder (``console.build_runner``, which formats
the config once instead of five times).

    python benchmarks/runner_start.py            # ~1 min on 2 busy cores
    python benchmarks/runner_start.py --rounds 5 --json out.json

The run is ``paragraph/c1`` on the tests' tiny synthetic world (48 samples, a 1-layer BLIP
text encoder of width 32, batch 16: 3 steps, one checkpoint), so the runner's own costs
dominate. Each measurement is a fresh process (imports and the world are not timed: only
``build + train()``); the two builders alternate for ``--rounds`` rounds and the medians are
compared. On a shared machine absolute times are noisy; the ratio of medians less so.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def one_run(builder: str, world: str, work_dir: str) -> float:
    """Seconds to build the runner of a tiny ``paragraph/c1`` run and train it (in this process)."""
    from mmengine.config import Config
    from mmengine.runner import Runner

    from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config
    from vlr_plugins.integrations.mmengine.console import build_runner
    from vlr_plugins.recipe import load_recipe

    with open(os.path.join(world, "world.json"), encoding="utf-8") as f:
        paths = json.load(f)
    recipe = load_recipe("paragraph/c1", {
        "model": paths["model"], "data": {"train": paths["train"], "image_embeddings": paths["image_embeddings"]},
        "train": {"batch_size": 16, "epochs": 1, "num_workers": 0, "log_interval": 1}})
    cfg = Config(recipe_to_mmengine_config(recipe, work_dir))  # logging at INFO, as `vlr train`
    start = time.perf_counter()
    runner = Runner.from_cfg(cfg) if builder == "mmengine" else build_runner(cfg)
    runner.train()
    return time.perf_counter() - start


def write_world(folder: str) -> None:
    from vlr_plugins.demo.synthetic_world import SyntheticWorld, SyntheticWorldConfig

    world = SyntheticWorld(SyntheticWorldConfig(seed=1, num_train=48, num_eval=16, dim=32))
    paths = {k: str(v) for k, v in world.write(folder).items()}
    tok = world.tokenizer()
    model = {"type": "BlipTextEncoder", "pretrained": None, "embed_dim": 32, "tokenizer": paths["tokenizer"],
             "config": dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=64, max_position_embeddings=160, pad_token_id=tok.pad_token_id,
                            bos_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id)}
    with open(os.path.join(folder, "world.json"), "w", encoding="utf-8") as f:
        json.dump({"model": model, "train": paths["train"], "image_embeddings": paths["image_embeddings"]}, f)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", help="write the timings here")
    p.add_argument("--one", choices=["mmengine", "vlr"], help=argparse.SUPPRESS)
    p.add_argument("--world", help=argparse.SUPPRESS)
    p.add_argument("--work", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one, args.world, args.work)))
        return
    times: dict[str, list[float]] = {"mmengine": [], "vlr": []}
    with tempfile.TemporaryDirectory() as tmp:
        world = os.path.join(tmp, "world")
        write_world(world)
        for r in range(args.rounds):
            for builder in ("mmengine", "vlr") if r % 2 == 0 else ("vlr", "mmengine"):
                out = subprocess.run([sys.executable, __file__, "--one", builder, "--world", world,
                                      "--work", os.path.join(tmp, f"{builder}{r}")],
                                     check=True, capture_output=True, text=True).stdout
                times[builder].append(json.loads(out.strip().splitlines()[-1]))
    medians = {k: statistics.median(v) for k, v in times.items()}
    for k in times:
        print(f"{k:<9} build + train: median {medians[k]:.2f} s  (runs: {', '.join(f'{t:.2f}' for t in times[k])})")
    print(f"vlr / mmengine: {medians['vlr'] / medians['mmengine']:.2f}; saved {medians['mmengine'] - medians['vlr']:.2f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"times_s": times, "median_s": medians}, f, indent=1)


if __name__ == "__main__":
    main()
