"""Benchmark: EOLEmbedder throughput, batched vs one by one, on random Qwen2-VL configs.

    python benchmarks/mllm_embed.py                 # tiny and small configs on CPU (~2 min on 2 cores)
    python benchmarks/mllm_embed.py --device cuda --dtype bfloat16 --configs small base

Builds random Qwen2-VL models from configs (nothing is downloaded) with the byte-level
test tokenizer of tests/_support/_tiny_mllm.py, then encodes N sentences (``encode_text``) and N 8-frame
56 x 56 clips (``encode_video``, CaRe's frame repetition) in batches of ``--batch`` and one
at a time. Prints items/s for both, the ratio (batched / one-by-one, measured in the same
run), and the peak memory: CUDA's max allocated on a GPU, the process's peak resident set
on CPU (which includes Python and the libraries; read the difference between configs).
Configs:

* ``tiny``  -- the tests' model: hidden 32, 2 layers, a 2-block vision tower of width 16.
* ``small`` -- hidden 256, 4 layers, the same vision tower.
* ``base``  -- hidden 1024, 8 layers (GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "_support"))

CONFIGS = {"tiny": (32, 2), "small": (256, 4), "base": (1024, 8)}
SENTENCES = [
    "A man slices a watermelon on a wooden table.",
    "Snow falls on a quiet street at night while a car passes slowly.",
    "Two dogs chase a ball across the grass.",
    "A woman in a red coat opens an umbrella, then walks away from the camera towards the station.",
]


def peak_memory_mb(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rate(fn, items, batch: int, repeat: int) -> float:
    """Items per second, best of ``repeat`` passes over ``items`` in chunks of ``batch``."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for i in range(0, len(items), batch):
            fn(items[i:i + batch])
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return len(items) / best


def run(name: str, args: argparse.Namespace) -> dict:
    from _tiny_mllm import clip, tiny_qwen2vl

    from vlr_plugins.mllm import EOLEmbedder

    hidden, layers = CONFIGS[name]
    model, processor = tiny_qwen2vl(hidden=hidden, layers=layers)
    model = model.to(device=args.device, dtype=getattr(torch, args.dtype))
    emb = EOLEmbedder(model=model, processor=processor, min_pixels=28 * 28, max_pixels=56 * 56)
    texts = [SENTENCES[i % len(SENTENCES)] for i in range(args.n)]
    clips = [clip(8, 56, 56, seed=i) for i in range(args.n)]
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    out = {"config": name, "hidden": hidden, "layers": layers, "device": args.device, "dtype": args.dtype,
           "params_m": sum(p.numel() for p in model.parameters()) / 1e6, "batch": args.batch, "n": args.n}
    for modality, items in (("text", texts), ("video", clips)):
        fn = getattr(emb, f"encode_{modality}")
        fn(items[:2])  # warm-up
        batched = rate(fn, items, args.batch, args.repeat)
        single = rate(fn, items, 1, args.repeat)
        out[f"{modality}_per_s_batched"] = batched
        out[f"{modality}_per_s_one_by_one"] = single
        out[f"{modality}_ratio"] = batched / single
    out["peak_memory_mb"] = peak_memory_mb(args.device)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", nargs="+", default=["tiny", "small"], choices=sorted(CONFIGS))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--n", type=int, default=32, help="items per modality")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    results = []
    print(f"{'config':<7} {'params':>8} {'texts/s b':>10} {'1-by-1':>8} {'ratio':>6} "
          f"{'videos/s b':>11} {'1-by-1':>8} {'ratio':>6} {'peak MB':>8}")
    for name in args.configs:
        r = run(name, args)
        results.append(r)
        print(f"{name:<7} {r['params_m']:>7.2f}M {r['text_per_s_batched']:>10.1f} {r['text_per_s_one_by_one']:>8.1f} "
              f"{r['text_ratio']:>6.2f} {r['video_per_s_batched']:>11.1f} {r['video_per_s_one_by_one']:>8.1f} "
              f"{r['video_ratio']:>6.2f} {r['peak_memory_mb']:>8.0f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
