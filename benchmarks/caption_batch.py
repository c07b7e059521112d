"""Benchmark: `vlr caption`'s generation batches (VideoCaptioner) against one clip at a time.

    python benchmarks/caption_batch.py --threads 1      # tiny and small configs on CPU, one torch thread
    python benchmarks/caption_batch.py --device cuda --dtype bfloat16 --configs small base

Builds random Qwen2-VL models from configs (nothing is downloaded; the byte-level test
tokenizer of tests/_support/_tiny_mllm.py) and captions ``--n`` clips of two sets with
greedy decoding of exactly ``--new-tokens`` tokens a clip (``min_new_tokens`` =
``max_new_tokens``: a random model's end-of-text would otherwise make the rows' lengths, and
so the timing, depend on the weights):

* ``video``: clips of 8 random 56 x 56 frames (equal prompts: no padding);
* ``video-mixed``: clips of 2-12 frames of 28-56 px (prompts of several lengths).

Three ways, the passes interleaved (best of ``--repeat``):

* ``1-by-1``: ``caption_clips([clip])`` per clip;
* ``chunks``: ``caption_clips(chunk)`` for chunks of ``--batch`` clips in the given order,
  each one left-padded batch;
* ``sorted``: one ``caption_clips(all, batch_size=--batch)``: length-sorted batches (what
  ``vlr caption --batch-size`` does).

Prints clips/s, the ratios against ``1-by-1`` (and ``sorted`` against ``chunks``) measured in
the same run, whether the batched captions equal the one-by-one captions (they must, under
greedy decoding), the CPU, torch threads and the load average before and after.
Configs as benchmarks/mllm_embed.py: ``tiny`` (hidden 32, 2 layers), ``small`` (hidden 256,
4 layers), ``base`` (hidden 1024, 8 layers; GPU).
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

from mllm_embed import CONFIGS  # noqa: E402

SETS = ("video", "video-mixed")
MODES = ("1-by-1", "chunks", "sorted")


def clips(name: str, n: int) -> list[torch.Tensor]:
    from _tiny_mllm import clip

    if name == "video":
        return [clip(8, 56, 56, seed=i) for i in range(n)]
    rng = random.Random(0)
    return [clip(rng.randint(2, 12), rng.choice([28, 56]), rng.choice([28, 56]), seed=i) for i in range(n)]


def run(name: str, args: argparse.Namespace) -> dict:
    from _tiny_mllm import tiny_qwen2vl

    from vlr_plugins.mllm.caption_settings import CaptionSettings
    from vlr_plugins.mllm.captioner import VideoCaptioner
    from vlr_plugins.mllm.media_input import VideoInput

    hidden, layers = CONFIGS[name]
    model, processor = tiny_qwen2vl(hidden=hidden, layers=layers)
    model = model.to(device=args.device, dtype=getattr(torch, args.dtype))
    settings = CaptionSettings(name="bench", prompt="Describe the video in detail.",
                               video_input=VideoInput(num_frames=12, min_pixels=28 * 28, max_pixels=56 * 56),
                               generation={"max_new_tokens": args.new_tokens, "min_new_tokens": args.new_tokens,
                                           "do_sample": False})
    captioner = VideoCaptioner(model, processor, settings)
    out = {"config": name, "hidden": hidden, "layers": layers, "device": args.device, "dtype": args.dtype,
           "params_m": sum(p.numel() for p in model.parameters()) / 1e6, "batch": args.batch, "n": args.n,
           "new_tokens": args.new_tokens}
    for set_name in args.sets:
        data = clips(set_name, args.n)
        chunks = [data[i:i + args.batch] for i in range(0, len(data), args.batch)]
        fns = {"1-by-1": lambda: [captioner.caption_clips([c])[0] for c in data],
               "chunks": lambda: [t for c in chunks for t in captioner.caption_clips(c)],
               "sorted": lambda: captioner.caption_clips(data, batch_size=args.batch)}
        captioner.caption_clips(data[:2])  # warm-up
        best, captions = dict.fromkeys(MODES, float("inf")), {}
        for _ in range(args.repeat):
            for mode, fn in fns.items():
                start = time.perf_counter()
                captions[mode] = fn()
                if args.device.startswith("cuda"):
                    torch.cuda.synchronize()
                best[mode] = min(best[mode], time.perf_counter() - start)
        counts = captioner.token_counts(data)
        r = {f"{m}_per_s": len(data) / best[m] for m in MODES}
        r.update(chunks_ratio=best["1-by-1"] / best["chunks"], sorted_ratio=best["1-by-1"] / best["sorted"],
                 sorted_vs_chunks=best["chunks"] / best["sorted"], tokens=[min(counts), max(counts)],
                 equal=captions["chunks"] == captions["1-by-1"] and captions["sorted"] == captions["1-by-1"])
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
    parser.add_argument("--n", type=int, default=16, help="clips per set")
    parser.add_argument("--batch", type=int, default=8, help="clips per generation batch (chunks; sorted batches)")
    parser.add_argument("--new-tokens", type=int, default=24, help="tokens generated per clip")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    machine = start_record(torch)
    print(f"{'config':<6} {'set':<11} {'tokens':>8} {'1-by-1/s':>9} {'chunks/s':>9} {'sorted/s':>9} "
          f"{'chunks x':>8} {'sorted x':>8} {'vs chunks':>9} {'equal':>5}")
    results = []
    for name in args.configs:
        r = run(name, args)
        results.append(r)
        for s in args.sets:
            x = r[s]
            print(f"{name:<6} {s:<11} {x['tokens'][0]:>3}-{x['tokens'][1]:<4} {x['1-by-1_per_s']:>9.2f} "
                  f"{x['chunks_per_s']:>9.2f} {x['sorted_per_s']:>9.2f} {x['chunks_ratio']:>8.2f} "
                  f"{x['sorted_ratio']:>8.2f} {x['sorted_vs_chunks']:>9.2f} {str(x['equal']):>5}", flush=True)
    end_record(machine, results, args.json)


if __name__ == "__main__":
    main()
