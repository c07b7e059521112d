"""Benchmark: retrieval_recall's streaming engine against the bare multiply and the full matrix.

    python benchmarks/retrieval_recall.py            # COCO-5K-test, then COCO train2017 size (~15 min)
    python benchmarks/retrieval_recall.py --quick    # small sizes, about a minute
    python benchmarks/retrieval_recall.py --device cuda --json out.json   # on a GPU (~1 min)

Random unit vectors (seeded), 256-d, float32, text j described by item j mod N (5-6 texts
per item). Every measurement runs in a fresh subprocess; memory is that process's peak
resident set after the embeddings exist minus its resident set right then (the peak is
reset with /proc/self/clear_refs, else read from getrusage). ``floor`` and ``engine`` run
alternately, several times (the best time is kept; at the small size 5 times per process),
so that load from other jobs on a shared machine hits both alike. Methods:

* ``floor``   -- one ``torch.mm`` per tile over the engine's own tiles: every score
  computed once, nothing else. The least any exact method must do.
* ``engine``  -- ``retrieval_recall(items, texts, owner)``: both directions, exact ranks.
* ``rows``    -- the previous implementation (``ranks_of_best_positive``, copied into this
  script as ``_ranks_by_rows``): each direction scored separately, chunk of queries x
  whole gallery, with (chunk, G) masks.
* ``full``    -- the whole score matrix and an argsort of every row and every column, as
  CLIP_benchmark / LAVIS do (only where it fits in memory).

With ``--device cuda`` the embeddings (the same seeded vectors) are moved to the GPU once
per size and every measurement runs in this process: one warm-up call, then ``--repeat``
timed calls, each ended by ``torch.cuda.synchronize()``; memory is the CUDA allocator's
peak during the timed calls minus what was allocated before them. ``floor`` and ``engine``
run in each precision (fp32 without TF32, as the engine multiplies; fp16 and bf16 summed in
float32), and each ``engine`` row keeps its recalls, which must equal fp32's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

D = 256
COCO_5K = (5_000, 25_000)
COCO_TRAIN = (118_287, 591_753)


# ---------------------------------------------------------------- one measurement (child)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_bytes(reset: bool) -> int:
    if reset:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def make_embeddings(n: int, m: int, seed: int = 0):
    """Unit rows written in place, 4096 at a time, so that generating them adds no peak."""
    import torch

    g = torch.Generator().manual_seed(seed)
    items, texts = torch.empty(n, D), torch.empty(m, D)
    for x in (items, texts):
        for a in range(0, len(x), 4096):
            block = x[a:a + 4096]
            block.normal_(generator=g)
            block.div_(block.norm(dim=1, keepdim=True))
    return items, texts, torch.arange(m) % n


def run_floor(items, texts, owner):
    import torch

    from vlr_plugins.eval._tiles import tile_shape

    rows, cols = tile_shape(len(items), len(texts), max_chunk_bytes=256 * 2**20, device=torch.device("cpu"))
    S = torch.empty(rows, cols)
    for c in range(0, len(texts), cols):
        Y = texts[c:c + cols]
        for a in range(0, len(items), rows):
            X = items[a:a + rows]
            if len(X) == rows and len(Y) == cols:
                torch.mm(X, Y.T, out=S)
            else:
                torch.mm(X, Y.T)


def run_engine(items, texts, owner):
    from vlr_plugins.eval import retrieval_recall

    return retrieval_recall(items, texts, owner)


def _ranks_by_rows(query, gallery, positive_mask_fn, chunk_bytes=256 * 2**20):
    """The package's ranker before the tiled engine (``ranks_of_best_positive``), kept here
    as the baseline: 0-based rank of each query's best positive, query (Q, D) and gallery
    (G, D) normalised, ``positive_mask_fn(start, stop)`` the (stop-start, G) positives."""
    import torch

    chunk_size = max(1, chunk_bytes // (4 * max(len(gallery), 1)))
    idx = torch.arange(len(gallery))
    ranks = torch.empty(len(query), dtype=torch.long)
    for start in range(0, len(query), chunk_size):
        stop = min(start + chunk_size, len(query))
        scores = query[start:stop] @ gallery.T
        best = scores.masked_fill(~positive_mask_fn(start, stop), float("-inf")).argmax(dim=1, keepdim=True)
        best_score = scores.gather(1, best)
        ahead = (scores > best_score) | ((scores == best_score) & (idx[None, :] < best))
        ranks[start:stop] = ahead.sum(dim=1)
    return ranks


def run_rows(items, texts, owner):
    import torch

    idx = torch.arange(len(items), device=items.device)
    _ranks_by_rows(items, texts, lambda a, b: owner[None, :] == idx[a:b, None])
    _ranks_by_rows(texts, items, lambda a, b: idx[None, :] == owner[a:b, None])


def run_full(items, texts, owner):
    import torch

    S = items @ texts.T
    order = S.argsort(dim=1, descending=True)
    i2t = (owner[order] == torch.arange(len(items), device=items.device)[:, None]).int().argmax(1)
    del order
    order = S.T.argsort(dim=1, descending=True)
    t2i = (order == owner[:, None]).int().argmax(1)
    return i2t, t2i


def child(method: str, n: int, m: int, inner: int) -> None:
    import torch

    items, texts, owner = make_embeddings(n, m)
    base = _rss_bytes()
    reset = _reset_peak()
    seconds = float("inf")
    for _ in range(inner):
        start = time.perf_counter()
        globals()[f"run_{method}"](items, texts, owner)
        seconds = min(seconds, time.perf_counter() - start)
    print(json.dumps({"seconds": seconds, "extra_bytes": max(0, _peak_bytes(reset) - base),
                      "threads": torch.get_num_threads()}))


# ---------------------------------------------------------------- on a GPU (one process)

PRECISIONS = ("fp32", "fp16", "bf16")


def gpu_floor(items, texts, owner, precision):
    import torch

    from vlr_plugins.eval._tiles import exact_matmuls, tile_shape

    dtype = getattr(torch, {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[precision])
    rows, cols = tile_shape(len(items), len(texts), max_chunk_bytes=256 * 2**20, device=items.device)
    X_all, Y_all = items.to(dtype), texts.to(dtype)  # the engine also converts once, not per tile
    S = torch.empty(rows, cols, dtype=dtype, device=items.device)
    with exact_matmuls():
        for c in range(0, len(texts), cols):
            Y = Y_all[c:c + cols]
            for a in range(0, len(items), rows):
                X = X_all[a:a + rows]
                if len(X) == rows and len(Y) == cols:
                    torch.mm(X, Y.T, out=S)
                else:
                    torch.mm(X, Y.T)


def gpu_engine(items, texts, owner, precision):
    from vlr_plugins.eval import retrieval_recall

    return retrieval_recall(items, texts, owner, precision=precision)


def gpu_rows(items, texts, owner, precision):
    run_rows(items, texts, owner)


def gpu_full(items, texts, owner, precision):
    run_full(items, texts, owner)


def gpu_table(sizes, repeat: int) -> list[dict]:
    """One record per (size, method, precision), measured on the current CUDA device."""
    import torch

    dev = torch.device("cuda")
    records = []
    for (n, m), extra in sizes:
        items, texts, owner = (x.to(dev) for x in make_embeddings(n, m))
        plan = [(method, p) for p in PRECISIONS for method in ("floor", "engine")] + [(e, "fp32") for e in extra]
        for method, precision in plan:
            run = globals()[f"gpu_{method}"]
            result = run(items, texts, owner, precision)  # warm-up: kernels, cuBLAS handles, allocator
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                result = run(items, texts, owner, precision)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
            record = {"items": n, "texts": m, "method": method, "precision": precision, "runs": repeat,
                      "best_s": min(times), "median_s": sorted(times)[len(times) // 2],
                      "peak_extra_mib": (torch.cuda.max_memory_allocated() - base) / 2**20}
            if method == "engine":
                record["recall"] = {k: float(v) for k, v in result.items()}
            records.append(record)
            print(f"  {method:7s} {precision} {n:>7,} x {m:>7,}: best {record['best_s']:.4f} s, "
                  f"{record['peak_extra_mib']:.1f} MiB extra", file=sys.stderr)
            del result
        del items, texts, owner
        torch.cuda.empty_cache()
    for r in records:
        floor = next(f for f in records if f["method"] == "floor" and f["precision"] == r["precision"]
                     and (f["items"], f["texts"]) == (r["items"], r["texts"]))
        r["time_over_floor"] = r["best_s"] / floor["best_s"]
    return records


def print_gpu_table(records: list[dict]) -> None:
    import torch

    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}, D = {D}\n")
    print("| items x texts | method | precision | runs | best wall time (s) | time / floor (same precision) "
          "| peak extra GPU memory (MiB) |")
    print("|---|---|---|---|---|---|---|")
    for r in records:
        print(f"| {r['items']:,} x {r['texts']:,} | {r['method']} | {r['precision']} | {r['runs']} | "
              f"{r['best_s']:.4f} | {r['time_over_floor']:.2f} | {r['peak_extra_mib']:,.1f} |")


# ---------------------------------------------------------------- the table (parent)


def measure(method: str, n: int, m: int, inner: int = 1) -> dict:
    load = os.getloadavg()[0]
    out = subprocess.run([sys.executable, __file__, "--child", method, str(n), str(m), str(inner)],
                         check=True, capture_output=True, text=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["load"] = (load + os.getloadavg()[0]) / 2
    print(f"  {method:7s} {n:>7,} x {m:>7,}: {result['seconds']:8.2f} s, "
          f"{result['extra_bytes'] / 2**20:8.1f} MiB extra, load {result['load']:.1f}", file=sys.stderr)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (about a minute)")
    parser.add_argument("--repeat", type=int, default=None,
                        help="runs of floor and engine per size, best time kept (default 3; on CPU 2 at train size)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: floor and engine in fp32/fp16/bf16 on the GPU, in this process")
    parser.add_argument("--json", metavar="PATH", help="also write the measurements here as JSON")
    parser.add_argument("--child", nargs=4, metavar=("METHOD", "N", "M", "INNER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], *map(int, args.child[1:]))
        return
    small, large = ((1_000, 5_000), (10_000, 50_000)) if args.quick else (COCO_5K, COCO_TRAIN)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            sys.exit(f"retrieval_recall.py: --device cuda, but torch {torch.__version__} sees no CUDA device")
        records = gpu_table([(small, ("rows", "full")), (large, ())], args.repeat or 3)
        print_gpu_table(records)
        if args.json:
            write_json(args.json, {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                   "cuda": torch.version.cuda, "dim": D, "records": records})
        return
    plan = [(small, args.repeat or 3, ("rows", "full")), (large, args.repeat or (3 if args.quick else 2), ())]
    rows, records = [], []
    for (n, m), repeat, once in plan:
        runs = {}
        for round_ in range(repeat):  # floor and engine alternate, so that load hits both alike
            for method in ("floor", "engine") + (once if round_ == 0 else ()):
                inner = 5 if (n, m) == small and method in ("floor", "engine") else 1
                runs.setdefault(method, []).append(measure(method, n, m, inner))
        floor = min(r["seconds"] for r in runs["floor"])
        for method, results in runs.items():
            best = min(results, key=lambda r: r["seconds"])
            memory = max(r["extra_bytes"] for r in results)
            rows.append(f"| {n:,} x {m:,} | {method} | {len(results)} | {best['seconds']:.2f} | "
                        f"{best['seconds'] / floor:.2f} | {memory / 2**20:,.1f} | {best['load']:.1f} |")
            records.append({"items": n, "texts": m, "method": method, "precision": "fp32", "runs": len(results),
                            "best_s": best["seconds"], "time_over_floor": best["seconds"] / floor,
                            "peak_extra_mib": memory / 2**20, "load": best["load"]})
    print(f"\n{os.cpu_count()} CPU cores, torch threads {runs['floor'][0]['threads']}, D = {D}, float32\n")
    print("| items x texts | method | runs | best wall time (s) | time / floor | peak extra memory (MiB) "
          "| load avg (best run) |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    if args.json:
        write_json(args.json, {"device": "cpu", "cpu_cores": os.cpu_count(), "dim": D, "records": records})


def write_json(path: str, data: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
