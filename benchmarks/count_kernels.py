"""Benchmark: the engine's counting step on one tile, torch's ops against numba's loop.

    python benchmarks/count_kernels.py                 # the engine's tile shapes, one thread
    python benchmarks/count_kernels.py --json out.json
    python benchmarks/count_kernels.py --sequence 10k:8   # a process evaluating 8 times: auto's choice

Each case counts one float32 tile as the engine does (``vlr_plugins.eval._tiles.count_above``):
``rows`` against one threshold per row, ``cols`` against one per column, ``both`` one after the
other (the grouped pass counts both directions of every tile), under ``VLR_COUNT_KERNEL=torch``
(a 0/1 float mask, then a matrix-vector product summing it) and ``numba`` (one compiled loop),
alternated in rounds, one thread (as in the engine's workers); medians in microseconds per tile,
the ratio numba / torch, and the counts of the two compared (they must be equal). Also the
time to load numba and its loops in a fresh process that has imported torch and the package
(``prepare``: numba's imports, its cache read; the first run on a machine also compiles), which
``auto`` weighs against the savings.

``--sequence SIZE:CALLS`` measures that choice where it matters: a process that evaluates
CALLS times at SIZE (``retrieval_recall.py``'s sizes and embeddings; a training run's
validation, a truncation sweep), in fresh processes alternated over ``--rounds``, under each
policy: ``torch`` (never load), ``numba`` (load at the first call, its time inside that call)
and ``auto`` (load once the process's counting has cost what loading does). Reported: each
policy's total and per-call seconds, and the call at which ``auto`` loaded; the rent-or-buy rule
promises ``auto``'s total within 2x of the better of the other two.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import cpu_description, describe  # noqa: E402

#: (rows, columns) of engine tiles: 2^18 and 2^19 scores (the calibrated shares seen), a
#: diagonal block of the grouped pass, a thin edge tile
SHAPES = ((181, 1448), (256, 2048), (228, 1136), (16, 4096))

_LOAD = """
import time
from vlr_plugins.eval import _count_kernels  # torch and the package imported first: not timed
t = time.perf_counter()
_count_kernels.prepare(0)
print(time.perf_counter() - t)
"""


_SEQUENCE = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from retrieval_recall import make_embeddings
from vlr_plugins.eval import _count_kernels, retrieval_recall
items, texts, owner = make_embeddings(int(sys.argv[2]), int(sys.argv[3]))
calls = []
for _ in range(int(sys.argv[4])):
    start = time.perf_counter()
    retrieval_recall(items, texts, owner)
    calls.append([time.perf_counter() - start, _count_kernels.enabled()])
print(json.dumps(calls))
"""
POLICIES = ("torch", "auto", "numba")


def sequence(size: str, calls: int, rounds: int) -> dict[str, list[list]]:
    """Per policy, each round's [seconds, loops used] of every call of a fresh process."""
    from retrieval_recall import SIZES

    n, m = SIZES[size]
    runs: dict[str, list[list]] = {policy: [] for policy in POLICIES}
    for _ in range(rounds):
        for policy in POLICIES:
            env = {**os.environ, "VLR_COUNT_KERNEL": policy}
            out = subprocess.run([sys.executable, "-c", _SEQUENCE, str(Path(__file__).resolve().parent), str(n),
                                  str(m), str(calls)], env=env, capture_output=True, text=True, check=True)
            runs[policy].append(json.loads(out.stdout.strip().splitlines()[-1]))
    return runs


def print_sequence(size: str, runs: dict[str, list[list]]) -> None:
    rounds = len(runs["torch"])
    print(f"\n{describe()}, a process evaluating {len(runs['torch'][0])} times at {size} (retrieval_recall), "
          f"medians of {rounds} alternated rounds of fresh processes\n")
    print("| policy | total (s) | per call (s) | loops from call | total / best of torch, numba |")
    print("|---|---|---|---|---|")
    totals = {p: statistics.median(sum(c[0] for c in run) for run in runs[p]) for p in POLICIES}
    best = min(totals["torch"], totals["numba"])
    for policy in POLICIES:
        per_call = [statistics.median(run[i][0] for run in runs[policy]) for i in range(len(runs[policy][0]))]
        first = next((i + 1 for i, c in enumerate(runs[policy][0]) if c[1]), None)
        print(f"| {policy} | {totals[policy]:.2f} | {' '.join(f'{t:.2f}' for t in per_call)} | "
              f"{first or 'never'} | {totals[policy] / best:.2f} |")


def load_seconds(rounds: int) -> list[float]:
    env = {**os.environ, "VLR_COUNT_KERNEL": "numba"}
    return [float(subprocess.run([sys.executable, "-c", _LOAD], env=env, capture_output=True, text=True,
                                 check=True).stdout) for _ in range(rounds)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=400, help="calls per measurement")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--sequence", metavar="SIZE:CALLS",
                        help="instead: a process evaluating CALLS times at SIZE (1k, 5k, 10k, train) per policy")
    args = parser.parse_args()
    if args.sequence:
        size, _, calls = args.sequence.partition(":")
        from retrieval_recall import SIZES

        if size not in SIZES or not calls.isdigit() or int(calls) < 1:
            sys.exit(f"count_kernels.py: --sequence {args.sequence!r}: expected SIZE:CALLS, SIZE one of "
                     f"{', '.join(SIZES)}, CALLS a positive number")
        print_sequence(size, sequence(size, int(calls), args.rounds))
        return

    import torch

    from vlr_plugins.eval import _count_kernels
    from vlr_plugins.eval._tiles import count_above

    torch.set_num_threads(1)
    os.environ["VLR_COUNT_KERNEL"] = "numba"
    if not _count_kernels.prepare(0):
        sys.exit("count_kernels.py: numba is not installed (pip install 'vlr-plugins[fast]')")
    g = torch.Generator().manual_seed(0)
    records = []
    for rows, cols in SHAPES:
        buffer = torch.rand(rows, cols + 16, generator=g)  # the engine's rows sit in padded buffers
        scores = buffer[:, :cols]
        row_t, col_t = torch.rand(rows, 1, generator=g), torch.rand(cols, generator=g)
        work, ones = torch.empty(rows, cols), torch.ones(max(rows, cols))
        for case in ("rows", "cols", "both"):
            def run(counts: tuple[torch.Tensor, torch.Tensor]) -> None:
                if case in ("rows", "both"):
                    count_above(scores, row_t, work, 1, counts[0], ones)
                if case in ("cols", "both"):
                    count_above(scores, col_t, work, 0, counts[1], ones)

            times: dict[str, list[float]] = {"torch": [], "numba": []}
            counts = {}
            for _ in range(args.rounds):
                for kernel in times:
                    os.environ["VLR_COUNT_KERNEL"] = kernel
                    counts[kernel] = (torch.zeros(rows), torch.zeros(cols))
                    run(counts[kernel])
                    start = time.perf_counter()
                    for _ in range(args.calls):
                        run(counts[kernel])
                    times[kernel].append((time.perf_counter() - start) / args.calls * 1e6)
            equal = all(torch.equal(a, b) for a, b in zip(counts["torch"], counts["numba"]))
            med = {k: statistics.median(v) for k, v in times.items()}
            records.append({"rows": rows, "cols": cols, "case": case, "torch_us": med["torch"],
                            "numba_us": med["numba"], "ratio": med["numba"] / med["torch"], "equal": equal})
    loads = load_seconds(3)

    print(f"\n{describe()}, torch {torch.__version__}, one thread, medians of {args.rounds} alternated rounds "
          f"of {args.calls} calls\n")
    print("| tile (rows x columns) | counted | torch's ops (us) | numba's loop (us) | numba / torch | counts equal |")
    print("|---|---|---|---|---|---|")
    for r in records:
        print(f"| {r['rows']} x {r['cols']} | {r['case']} | {r['torch_us']:.1f} | {r['numba_us']:.1f} | "
              f"{r['ratio']:.2f} | {'yes' if r['equal'] else 'NO'} |")
    print(f"\nloading numba and its loops in a fresh process: {', '.join(f'{s:.2f}' for s in loads)} s")
    if not all(r["equal"] for r in records):
        sys.exit("count_kernels.py: the two ways counted differently")
    if args.json:
        tmp = f"{args.json}.tmp"
        with open(tmp, "w") as f:
            json.dump({"machine": cpu_description(), "torch": torch.__version__, "records": records,
                       "load_s": loads}, f, indent=1)
        os.replace(tmp, args.json)


if __name__ == "__main__":
    main()
