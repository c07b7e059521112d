"""Benchmark: how long the ``vlr`` command takes to answer what needs no model: ``vlr --help``,
``vlr train --help``, a bad option, a recipe that is not there, and ``vlr list`` (which imports
what its entries are defined with), against ``python -c pass`` and ``python -c "import torch"``
measured in the same run.

    python benchmarks/cli_latency.py                 # ~1 min on 2 busy cores
    python benchmarks/cli_latency.py --rounds 9 --json cli_latency.json
    python benchmarks/cli_latency.py --before OTHER/src   # also another checkout's vlr --help / list

Each measurement is a fresh process (``python -m vlr_plugins.cli ...``, this checkout's
package first on the path), wall time from start to exit; the commands take turns, round
after round, and each one's median over ``--rounds`` is shown in seconds and as a ratio to
``import torch``. The CPU and the load average are printed with the figures: on a shared
machine the absolute times move with the load, the ratios less.

Bytecode is cached as in an installed package (``PYTHONDONTWRITEBYTECODE`` is dropped and
``PYTHONPYCACHEPREFIX`` points at a temporary folder, so no checkout is written to; an untimed
first run of each command fills it); ``--no-bytecode`` times every import compiled from source.
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import describe  # noqa: E402

_SRC = str(Path(__file__).resolve().parents[1] / "src")
_CLI = [sys.executable, "-m", "vlr_plugins.cli"]

#: name -> (argv, the exit status it must give)
COMMANDS = {
    "python -c pass": ([sys.executable, "-c", "pass"], 0),
    "python -c 'import torch'": ([sys.executable, "-c", "import torch"], 0),
    "vlr --help": ([*_CLI, "--help"], 0),
    "vlr train --help": ([*_CLI, "train", "--help"], 0),
    "vlr train RECIPE --bad-option": ([*_CLI, "train", "paragraph/c1", "--no-such-option"], 2),
    "vlr train no/such/recipe": ([*_CLI, "train", "no/such/recipe"], 2),
    "vlr list": ([*_CLI, "list"], 0),
}


def one(argv: list[str], code: int, env: dict[str, str]) -> float:
    """Wall seconds of ``argv`` in a fresh process; it must exit with ``code``."""
    start = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if out.returncode != code:
        raise SystemExit(f"{' '.join(argv)} exited {out.returncode}, expected {code}:\n{out.stderr[-2000:]}")
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", help="write the timings here")
    p.add_argument("--before", metavar="SRC", help="another checkout's src folder (the code before a change): its "
                                                   "vlr --help, bad option and vlr list are timed in the same rounds")
    p.add_argument("--no-bytecode", action="store_true", help="compile every import from source (as under "
                                                                   "PYTHONDONTWRITEBYTECODE=1 with no cached bytecode)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as pycache:
        run(args, pycache)


def run(args: argparse.Namespace, pycache: str) -> None:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    base.update({"PYTHONDONTWRITEBYTECODE": "1"} if args.no_bytecode else {"PYTHONPYCACHEPREFIX": pycache})

    def env_of(src: str) -> dict[str, str]:
        return {**base, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
                "HF_HUB_OFFLINE": "1"}

    commands = {name: (argv, code, env_of(_SRC)) for name, (argv, code) in COMMANDS.items()}
    if args.before:
        for name in ("vlr --help", "vlr train RECIPE --bad-option", "vlr list"):
            argv, code = COMMANDS[name]
            commands[f"{name} (before)"] = (argv, code, env_of(args.before))
    for command in commands.values():  # warm the file cache; not timed
        one(*command)
    load_before = os.getloadavg()
    times: dict[str, list[float]] = {name: [] for name in commands}
    for r in range(args.rounds):
        names = list(commands) if r % 2 == 0 else list(reversed(commands))
        for name in names:
            times[name].append(one(*commands[name]))
    load_after = os.getloadavg()
    medians = {k: statistics.median(v) for k, v in times.items()}
    torch_s = medians["python -c 'import torch'"]
    print(describe())
    print("bytecode: " + ("none (every import compiled from source)" if args.no_bytecode else "cached, as installed"))
    print(f"load average (1, 5, 15 min): before {', '.join(f'{x:.2f}' for x in load_before)}; "
          f"after {', '.join(f'{x:.2f}' for x in load_after)}")
    print(f"{'command':<41} {'median s':>9} {'/ import torch':>15}  runs")
    for name, runs in times.items():
        print(f"{name:<41} {medians[name]:>9.3f} {medians[name] / torch_s:>15.2f}  "
              f"{', '.join(f'{t:.3f}' for t in runs)}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"machine": describe(), "before": args.before, "bytecode": not args.no_bytecode, "load_average": [load_before, load_after],
                       "times_s": times, "median_s": medians}, f, indent=1)


if __name__ == "__main__":
    main()
