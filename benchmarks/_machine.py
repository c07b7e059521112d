"""What machine a benchmark ran on, printed and recorded with every result (machines differ
between runs: never compare numbers from two without it)."""

from __future__ import annotations

import json
import os
import platform
import subprocess


def cpu_description() -> dict:
    """``{"cpu": model name, "cores": logical CPUs, "l2": L2 size as lscpu prints it, "flags": the
    widest SIMD the CPU has}``; what cannot be read is None."""
    fields = {}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines())}
    except (OSError, subprocess.CalledProcessError):
        pass
    flags = fields.get("Flags", "").split()
    simd = next((f for f in ("avx512f", "avx2", "avx", "sse4_2", "asimd") if f in flags), None)
    return {"cpu": fields.get("Model name") or platform.processor() or None, "cores": os.cpu_count(),
            "l2": fields.get("L2 cache"), "simd": simd}


def describe() -> str:
    """One line: ``CPU: AMD EPYC (2 cores, L2 2 MiB (2 instances), avx2)``."""
    d = cpu_description()
    return f"CPU: {d['cpu']} ({d['cores']} cores, L2 {d['l2']}, {d['simd']})"


def start_record(torch) -> dict:
    """The record a torch benchmark starts with (machine, torch threads, load average), printed as
    one line; :func:`end_record` completes it."""
    record = {"machine": describe(), "torch_threads": torch.get_num_threads(), "load_before": os.getloadavg()}
    print(f"{record['machine']}; torch {torch.__version__}, {record['torch_threads']} threads; "
          f"load average {' '.join(f'{x:.1f}' for x in record['load_before'])}")
    return record


def end_record(record: dict, results: list, path: str | None) -> None:
    """The load average after, printed and recorded; the record and ``results`` written as JSON to
    ``path`` when given."""
    record["load_after"] = os.getloadavg()
    print(f"load average after: {' '.join(f'{x:.1f}' for x in record['load_after'])}")
    if path:
        with open(path, "w") as f:
            json.dump({**record, "results": results}, f, indent=1)
