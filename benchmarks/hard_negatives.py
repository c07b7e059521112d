"""Benchmark: mine_hard_negatives against faiss-cpu's exact IndexFlatIP search.

    python benchmarks/hard_negatives.py                    # 10K x 50K (3 rounds), COCO train size (1 round)
    python benchmarks/hard_negatives.py --sizes 10k --rounds 5
    python benchmarks/hard_negatives.py --sizes coco --json out.json

Random unit vectors (seeded), 256-d, float32; query i's one positive is gallery entry
i * G // Q (COCO's captions grouped by image: 591,753 captions x 118,287 images). Both
methods mine the k = 10 hardest negatives from rank range_min = 0 (``--k``,
``--range-min``):

* ``engine`` -- ``mine_hard_negatives(queries, gallery, positives, k=k, range_min=r)``.
* ``faiss``  -- ``IndexFlatIP`` over the gallery (``add`` timed too), ``search`` of
  k + range_min + 1 (the most positives a query has), then the positive dropped and the
  window sliced in numpy (timed too): what sentence-transformers' ``use_faiss=True`` does.

Every measurement runs in a fresh subprocess: time is the call's wall time; memory is the
process's peak resident set during the call minus its resident set before it (the peak
reset with /proc/self/clear_refs). Rounds alternate the methods, so that load from other
jobs on a shared machine hits both alike; the ratio is between the medians (and, as the
least disturbed runs, between the fastest rounds). The results
are compared: indices equal for every query, or else (a near-tie ordered differently by
two float32 products) the two score lists equal within 2e-6.
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

from _machine import cpu_description, describe

D = 256
SIZES = {"10k": (10_000, 50_000), "coco": (591_753, 118_287)}
ROUNDS = {"10k": 3, "coco": 1}


def unit_vectors(n: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    out = torch.empty(n, D)
    for a in range(0, n, 65536):  # normalised in blocks: no second whole copy
        block = torch.randn(min(65536, n - a), D, generator=g)
        out[a:a + len(block)] = block / block.norm(dim=1, keepdim=True)
    return out


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(method: str, size: str, k: int, range_min: int, out: str) -> None:
    import numpy as np
    import torch

    n_q, n_g = SIZES[size]
    queries, gallery = unit_vectors(n_q, 0), unit_vectors(n_g, 1)
    positive = torch.arange(n_q, dtype=torch.long) * n_g // n_q
    if method == "faiss":
        import faiss

        queries_np, gallery_np, positive_np = queries.numpy(), gallery.numpy(), positive.numpy()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    before = rss_bytes()
    start = time.perf_counter()
    if method == "engine":
        from vlr_plugins.eval import mine_hard_negatives

        mined = mine_hard_negatives(queries, gallery, (torch.arange(n_q + 1), positive), k=k, range_min=range_min)
        indices, scores = mined.indices.numpy(), mined.scores.numpy()
        threads = torch.get_num_threads()
    else:
        index = faiss.IndexFlatIP(D)
        index.add(gallery_np)
        found_scores, found = index.search(queries_np, k + range_min + 1)
        keep = found != positive_np[:, None]
        order = np.argsort(~keep, axis=1, kind="stable")[:, range_min:range_min + k]  # kept ones first, in order
        indices = np.take_along_axis(found, order, 1)
        scores = np.take_along_axis(found_scores, order, 1)
        threads = faiss.omp_get_max_threads()
    seconds = time.perf_counter() - start
    peak = peak_bytes() - before
    np.savez(out, indices=indices, scores=scores)
    print(json.dumps({"seconds": seconds, "peak_mb": peak / 2**20, "threads": threads}))


def run_child(method: str, size: str, args, out: str) -> dict:
    cmd = [sys.executable, __file__, "--child", method, "--size", size, "--k", str(args.k),
           "--range-min", str(args.range_min), "--out", out]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"{method} at {size} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(engine_file: str, faiss_file: str) -> dict:
    import numpy as np

    ours, theirs = np.load(engine_file), np.load(faiss_file)
    differ = np.flatnonzero((ours["indices"] != theirs["indices"]).any(1))
    gap = float(np.abs(ours["scores"][differ] - theirs["scores"][differ]).max()) if len(differ) else 0.0
    return {"queries": len(ours["indices"]), "differing_queries": len(differ), "max_score_gap_there": gap,
            "equal": len(differ) == 0 or gap <= 2e-6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10k,coco", help="comma-separated: 10k (10,000 x 50,000), coco "
                        "(591,753 x 118,287)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per size (default 3 at 10k, 1 at coco)")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--range-min", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the results here too")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--size", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.size, args.k, args.range_min, args.out)
        return
    report = {"machine": cpu_description(), "k": args.k, "range_min": args.range_min, "sizes": {}}
    print(f"{describe()}; D={D}, k={args.k}, range_min={args.range_min}")
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes.split(","):
            rounds = args.rounds or ROUNDS[size]
            runs: dict[str, list[dict]] = {"engine": [], "faiss": []}
            for r in range(rounds):
                for method in runs:
                    runs[method].append(run_child(method, size, args, os.path.join(tmp, f"{method}.npz")))
                    print(f"  {size} round {r + 1} {method}: {runs[method][-1]['seconds']:.2f} s", flush=True)
            check = compare(os.path.join(tmp, "engine.npz"), os.path.join(tmp, "faiss.npz"))
            row = {m: {"median_s": statistics.median(x["seconds"] for x in v), "min_s": min(x["seconds"] for x in v),
                       "peak_mb": max(x["peak_mb"] for x in v), "threads": v[0]["threads"],
                       "seconds": [round(x["seconds"], 3) for x in v]} for m, v in runs.items()}
            row["ratio_engine_over_faiss"] = row["engine"]["median_s"] / row["faiss"]["median_s"]
            row["ratio_of_minima"] = row["engine"]["min_s"] / row["faiss"]["min_s"]  # the least disturbed runs
            row["results"] = check
            report["sizes"][size] = row
            n_q, n_g = SIZES[size]
            print(f"{size} ({n_q:,} x {n_g:,}), {rounds} round(s):")
            for m in runs:
                print(f"  {m:7s} {row[m]['median_s']:8.2f} s  peak {row[m]['peak_mb']:8.1f} MB  "
                      f"({row[m]['threads']} threads) {row[m]['seconds']}")
            print(f"  engine / faiss = {row['ratio_engine_over_faiss']:.3f} (medians), "
                  f"{row['ratio_of_minima']:.3f} (fastest rounds); results: "
                  f"{check['differing_queries']} of {check['queries']:,} queries differ"
                  f"{' (near-ties only, max score gap %.1e)' % check['max_score_gap_there'] if check['differing_queries'] else ''}"
                  f" -> {'equal' if check['equal'] else 'NOT EQUAL'}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
