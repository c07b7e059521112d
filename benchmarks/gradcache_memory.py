"""Benchmark: peak CPU memory of one training step with and without gradient caching.

    python benchmarks/gradcache_memory.py               # batch 64, 128, 256, 512; chunk 32 (1-6 min)
    python benchmarks/gradcache_memory.py --json out.json

The step: a random-init BLIP-shaped text encoder (``BlipTextEncoder``, 4 layers, width 128,
dropout 0.1, train mode) encodes B captions of 48 tokens, ``MultiPositiveInfoNCELoss``
scores them against B stored image embeddings, and ``loss.backward()`` runs. ``uncached``
encodes the batch in one pass; ``cached`` through ``cached_encode(chunk_size=32)``
(GradCache: no graph on the first pass, each chunk re-encoded with a graph in backward).

Memory: every measurement runs in a fresh subprocess (glibc's mmap threshold fixed at 64 KiB
so that freed tensors leave the resident set); after the model, its inputs and the image
embeddings exist, the peak resident set is reset (``/proc/self/clear_refs``) and the
resident set read; the step's memory is the peak resident set after the step minus that.
This is process RSS, so it counts everything the step allocates (activations, the graph,
gradients, allocator slack), not only tensors. The parameter gradients (the same at every
batch) are part of it.

The printed ratios are peak(B) / peak(64) per method, from one run. Timings on a shared
machine are noisy; only memory is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

BATCHES = (64, 128, 256, 512)
CHUNK = 32
TOKENS = 48
ENCODER = dict(vocab_size=1000, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
               intermediate_size=512, max_position_embeddings=64, hidden_dropout_prob=0.1,
               attention_probs_dropout_prob=0.1)


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def _measure(batch: int, method: str) -> dict:
    """One step in this process; its peak memory above what existed before it."""
    import gc

    import torch

    from vlr_plugins.losses import MultiPositiveInfoNCELoss, cached_encode
    from vlr_plugins.text.blip_text_encoder import BlipTextEncoder

    torch.set_num_threads(1)
    torch.manual_seed(0)
    encoder = BlipTextEncoder(config=ENCODER, embed_dim=64).train()
    ids = torch.randint(5, ENCODER["vocab_size"], (batch, TOKENS))
    mask = torch.ones_like(ids)
    image = torch.randn(batch, 64)
    loss_fn = MultiPositiveInfoNCELoss()
    chunk = CHUNK if method == "cached" else None
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak resident set (VmHWM) to the current one
    before = _status("VmRSS")
    emb = cached_encode(encoder, ids, mask, chunk_size=chunk, parameters=encoder)
    loss = loss_fn(image, emb)
    loss.backward()
    peak = _status("VmHWM")
    return {"batch": batch, "method": method, "peak_bytes": peak - before, "loss": float(loss)}


def _child(batch: int, method: str) -> dict:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, __file__, "--child", str(batch), method], env=env,
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", nargs=2, metavar=("BATCH", "METHOD"), help=argparse.SUPPRESS)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_measure(int(args.child[0]), args.child[1])))
        return 0

    rows = [_child(b, m) for b in BATCHES for m in ("uncached", "cached")]
    mib = 1024 * 1024
    base = {r["method"]: r["peak_bytes"] for r in rows if r["batch"] == BATCHES[0]}
    print(f"peak memory of one step (MiB above the state before it; process RSS), chunk {CHUNK}")
    print(f"{'batch':>6} {'uncached':>10} {'ratio':>6} {'cached':>10} {'ratio':>6}")
    for b in BATCHES:
        by = {r["method"]: r["peak_bytes"] for r in rows if r["batch"] == b}
        print(f"{b:>6} {by['uncached'] / mib:>10.1f} {by['uncached'] / base['uncached']:>6.2f} "
              f"{by['cached'] / mib:>10.1f} {by['cached'] / base['cached']:>6.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"chunk": CHUNK, "tokens": TOKENS, "encoder": ENCODER, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
