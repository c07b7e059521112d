"""Benchmark: the engine's counting step on one tile, torch's ops against numba's loop.

    python benchmarks/count_kernels.py                 # the engine's tile shapes, one thread
    python benchmarks/count_kernels.py --json out.json

Each case counts one float32 tile as the engine does (``vlr_plugins.eval._tiles.count_above``):
``rows`` against one threshold per row, ``cols`` against one per column, ``both`` one after the
other (the grouped pass counts both directions of every tile), under ``VLR_COUNT_KERNEL=torch``
(a 0/1 float mask, then a matrix-vector product summing it) and ``numba`` (one compiled loop),
alternated in rounds, one thread (as in the engine's workers); medians in microseconds per tile,
the ratio numba / torch, and the counts of the two compared (they must be equal). Also the
time to load numba and its loops in a fresh process that has imported torch and the package
(``prepare``: numba's imports, its cache read; the first run on a machine also compiles), which
``auto`` weighs against the savings.
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


def load_seconds(rounds: int) -> list[float]:
    env = {**os.environ, "VLR_COUNT_KERNEL": "numba"}
    return [float(subprocess.run([sys.executable, "-c", _LOAD], env=env, capture_output=True, text=True,
                                 check=True).stdout) for _ in range(rounds)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=400, help="calls per measurement")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()

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
