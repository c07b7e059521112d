"""Benchmark: EOLEmbedder throughput, length-sorted batches vs the old fixed chunks vs one by one.

    python benchmarks/mllm_embed.py                   # tiny and small configs on CPU (~6 min on 2 loaded cores)
    python benchmarks/mllm_embed.py --threads 1       # one torch thread (steadier on a loaded machine)
    python benchmarks/mllm_embed.py --device cuda --dtype bfloat16 --configs small base

Builds random Qwen2-VL models from configs (nothing is downloaded) with the byte-level test
tokenizer of tests/_support/_tiny_mllm.py and encodes four item sets of ``--n`` items:

* ``text``: the four sentences the benchmark always used (39-93 characters), in turn;
* ``text-mixed``: sentences of 4-12 or 25-70 words (short queries beside long captions);
* ``video``: clips of 8 random 56 x 56 frames (CaRe's frame repetition);
* ``video-mixed``: clips of 2-12 frames of 28-56 px.

Each set is encoded three ways, the passes interleaved (best of ``--repeat``):

* ``1-by-1``: one ``encode_*([item])`` call per item;
* ``old``: chunks of ``--batch`` in the given order, each one left-padded forward (an
  embedder with ``batch_size=None``: what ``encode_*`` did before length batching);
* ``sorted``: one ``encode_*`` call for all items, cut by the embedder into length-sorted
  batches of at most ``--batch`` (``--max-batch-tokens``: a token budget too).

Prints items/s, the ratios (``old`` and ``sorted`` against ``1-by-1``, ``sorted`` against
``old``, measured in the same run), the share of computed tokens that are real (the rest is
left padding; exact, not timed), the CPU, the torch threads and the load average before and
after (the ratios on a shared machine depend on its load: docs/benchmarks.md). Configs:

* ``tiny``  -- the tests' model: hidden 32, 2 layers, a 2-block vision tower of width 16.
* ``small`` -- hidden 256, 4 layers, the same vision tower.
* ``base``  -- hidden 1024, 8 layers (GPU).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "_support"))
sys.path.insert(0, os.path.dirname(__file__))

CONFIGS = {"tiny": (32, 2), "small": (256, 4), "base": (1024, 8)}
SENTENCES = [
    "A man slices a watermelon on a wooden table.",
    "Snow falls on a quiet street at night while a car passes slowly.",
    "Two dogs chase a ball across the grass.",
    "A woman in a red coat opens an umbrella, then walks away from the camera towards the station.",
]
WORDS = ("a dog cat man woman child runs sits jumps walks on the grass snow table street quickly slowly red "
         "blue camera then away towards station car ball").split()
SETS = ("text", "text-mixed", "video", "video-mixed")
MODES = ("1-by-1", "old", "sorted")


def items(name: str, n: int) -> list:
    from _tiny_mllm import clip

    rng = random.Random(0)
    if name == "text":
        return [SENTENCES[i % len(SENTENCES)] for i in range(n)]
    if name == "text-mixed":
        return [" ".join(rng.choice(WORDS) for _ in range(rng.choice([rng.randint(4, 12), rng.randint(25, 70)])))
                + "." for _ in range(n)]
    if name == "video":
        return [clip(8, 56, 56, seed=i) for i in range(n)]
    return [clip(rng.randint(2, 12), rng.choice([28, 56]), rng.choice([28, 56]), seed=i) for i in range(n)]



def _share(value: str) -> float | None:
    return None if value == "none" else float(value)


def run(name: str, args: argparse.Namespace) -> dict:
    from _tiny_mllm import tiny_qwen2vl

    from vlr_plugins.mllm import EOLEmbedder
    from vlr_plugins.mllm.length_batches import length_batches

    hidden, layers = CONFIGS[name]
    model, processor = tiny_qwen2vl(hidden=hidden, layers=layers)
    model = model.to(device=args.device, dtype=getattr(torch, args.dtype))
    kw = dict(model=model, processor=processor, min_pixels=28 * 28, max_pixels=56 * 56)
    old = EOLEmbedder(batch_size=None, **kw)
    new = EOLEmbedder(batch_size=args.batch, max_batch_tokens=args.max_batch_tokens,
                      **({} if args.max_padding == "default" else {"max_padding": _share(args.max_padding)}), **kw)
    out = {"config": name, "hidden": hidden, "layers": layers, "device": args.device, "dtype": args.dtype,
           "params_m": sum(p.numel() for p in model.parameters()) / 1e6, "batch": args.batch,
           "max_batch_tokens": args.max_batch_tokens, "max_padding": new.max_padding, "n": args.n}
    for set_name in args.sets:
        modality = set_name.split("-")[0]
        data = items(set_name, args.n)
        old_fn, new_fn = getattr(old, f"encode_{modality}"), getattr(new, f"encode_{modality}")
        chunks = [data[i:i + args.batch] for i in range(0, len(data), args.batch)]
        fns = {"1-by-1": lambda: [old_fn([x]) for x in data], "old": lambda: [old_fn(c) for c in chunks],
               "sorted": lambda: new_fn(data)}
        new_fn(data[:2]), old_fn(data[:1])  # warm-up
        best = dict.fromkeys(MODES, float("inf"))
        for _ in range(args.repeat):
            for mode, fn in fns.items():
                start = time.perf_counter()
                fn()
                if args.device.startswith("cuda"):
                    torch.cuda.synchronize()
                best[mode] = min(best[mode], time.perf_counter() - start)
        text, media = new._prepare(modality, data)
        counts = new.token_counts(modality, text, media)
        groups = length_batches(counts, batch_size=args.batch, max_tokens=args.max_batch_tokens,
                                max_padding=new.max_padding)
        r = {f"{m}_per_s": len(data) / best[m] for m in MODES}
        r.update(old_ratio=best["1-by-1"] / best["old"], sorted_ratio=best["1-by-1"] / best["sorted"],
                 sorted_vs_old=best["old"] / best["sorted"],
                 real_share_old=sum(counts) / sum(len(c) * max(counts[i:i + args.batch])
                                                   for i, c in zip(range(0, len(data), args.batch), chunks)),
                 real_share_sorted=sum(counts) / sum(len(g) * max(counts[i] for i in g) for g in groups),
                 tokens=[min(counts), max(counts)])
        out[set_name] = r
    return out


def main() -> None:
    from _machine import end_record, start_record

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", nargs="+", default=["tiny", "small"], choices=sorted(CONFIGS))
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--n", type=int, default=32, help="items per set")
    parser.add_argument("--batch", type=int, default=16, help="items per forward (old chunks; sorted batches)")
    parser.add_argument("--max-batch-tokens", type=int, help="the sorted batches' token budget (default none)")
    parser.add_argument("--max-padding", default="default",
                        help="the sorted batches' padding share: a fraction, 'none', or 'default' (the embedder's)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    print(f"max padding of the sorted batches: {args.max_padding}")
    machine = start_record(torch)
    print(f"{'config':<6} {'set':<11} {'tokens':>8} {'1-by-1/s':>9} {'old/s':>7} {'sorted/s':>8} "
          f"{'old x':>6} {'sorted x':>8} {'vs old':>6} {'real old':>8} {'real sorted':>11}")
    results = []
    for name in args.configs:
        r = run(name, args)
        results.append(r)
        for s in args.sets:
            x = r[s]
            print(f"{name:<6} {s:<11} {x['tokens'][0]:>3}-{x['tokens'][1]:<4} {x['1-by-1_per_s']:>9.1f} "
                  f"{x['old_per_s']:>7.1f} {x['sorted_per_s']:>8.1f} {x['old_ratio']:>6.2f} {x['sorted_ratio']:>8.2f} "
                  f"{x['sorted_vs_old']:>6.2f} {x['real_share_old']:>8.0%} {x['real_share_sorted']:>11.0%}", flush=True)
    end_record(machine, results, args.json)


if __name__ == "__main__":
    main()
