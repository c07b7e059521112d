"""The GPU check's summary: summary.json and summary.md in OUTDIR (benchmarks/gpu_check.sh).

    python benchmarks/gpu_summary.py OUTDIR --steps STEPS.jsonl --junit DIR --started EPOCH_SECONDS \\
        [--site main=DIR --site lavis=DIR]

Reads the pytest JUnit files in ``--junit``, the benchmarks' ``OUTDIR/retrieval_recall.json``
(and ``train_step.json``, ``mllm_embed.json``, ``scaling.json``, ``caption_batch.json`` where present)
and ``STEPS.jsonl`` (one ``{"step", "status", "rc", "seconds", "note"}``
per step, written by the shell script), adds the machine (GPU, driver, torch, CUDA, Python)
and the versions of the packages carried in each ``--site``, prints the Markdown, and exits
1 unless everything passed: every step ``ok``, no test failed, errored or skipped (the GPU
check requires them all), and each engine precision's recalls equal fp32's. A test skipped
because an optional accelerator package is not installed (tests/conftest.py's
``optional_package`` marker) is listed as ``not run (optional)`` and is not a failure.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

#: the start of a skip reason for a missing optional package (tests/conftest.py)
OPTIONAL_SKIP = "optional package not installed"
#: issue 25's goal for ``vlr precompute`` against its tower's forward rate (benchmarks/scaling.py)
PIPELINE_GOAL = 0.9


def read_junit(path: Path) -> list[dict]:
    """One ``{"id", "outcome", "seconds", "message"}`` per test case of a pytest JUnit XML file."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            child = case.find(tag)
            if child is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                text = (child.get("message") or child.text or "").strip()
                message = text.splitlines()[0][:300] if text else ""
                if outcome == "skipped" and OPTIONAL_SKIP in message:
                    outcome = "not run (optional)"
                break
        name = f"{case.get('classname', '')}::{case.get('name', '')}".lstrip(":")
        cases.append({"id": name, "outcome": outcome, "seconds": float(case.get("time") or 0), "message": message})
    return cases


def recall_checks(bench: dict) -> list[dict]:
    """Each size's fp16 / bf16 engine recalls against its fp32 ones (retrieval_recall's guarantee)."""
    out = []
    engine = [r for r in bench.get("records", []) if r["method"] == "engine"]
    for r in engine:
        if r["precision"] == "fp32":
            continue
        ref = next((f for f in engine if f["precision"] == "fp32" and (f["items"], f["texts"]) ==
                    (r["items"], r["texts"])), None)
        keys = [k for k in (ref or {}).get("recall", {}) if "_r" in k]
        same = ref is not None and all(r["recall"].get(k) == ref["recall"][k] for k in keys)
        out.append({"size": f"{r['items']:,} x {r['texts']:,}", "precision": r["precision"], "equal_to_fp32": same})
    return out


def machine() -> dict:
    info: dict = {"python": platform.python_version(), "host": platform.node()}
    try:
        import torch

        info.update(torch=torch.__version__, cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            info.update(gpu=torch.cuda.get_device_name(0), gpu_memory_gib=round(props.total_memory / 2**30, 1),
                        capability=f"{props.major}.{props.minor}", cudnn=torch.backends.cudnn.version())
    except Exception as e:  # the summary is still written when torch itself is broken
        info["torch_error"] = repr(e)
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        if smi.returncode == 0:
            info["nvidia_smi"] = smi.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


def carried(site: str) -> dict[str, str]:
    """Name -> version of the distributions installed in one ``--target`` folder."""
    if not os.path.isdir(site):
        return {}
    return {d.metadata["Name"]: d.version for d in importlib.metadata.distributions(path=[site])}


def markdown(s: dict) -> str:
    m = s["machine"]
    if "gpu" in m:
        gpu = (f"{m['gpu']} ({m['gpu_memory_gib']} GiB, compute capability {m['capability']}); "
               f"nvidia-smi: {m.get('nvidia_smi', 'n/a')}")
    else:
        gpu = "none visible" + (f" ({m['torch_error']})" if "torch_error" in m else "")
    lines = [f"# GPU check: {s['status'].upper()}", "", f"- GPU: {gpu}",
             f"- torch {m.get('torch', '?')}, CUDA {m.get('cuda', '?')}, cuDNN {m.get('cudnn', '?')}, "
             f"Python {m['python']}",
             f"- wall time: {s['wall_seconds']:.0f} s; finished {s['finished']}"]
    if s["problems"]:
        lines += ["", "## Problems", ""] + [f"- {p}" for p in s["problems"]]
    lines += ["", "## Steps", "", "| step | status | seconds | note |", "|---|---|---|---|"]
    lines += [f"| {st['step']} | {st['status']} | {st.get('seconds', 0):.0f} | {st.get('note', '')} |"
              for st in s["steps"]]
    lines += ["", "## Tests", "", "| test | outcome | seconds | message |", "|---|---|---|---|"]
    lines += [f"| {t['id']} | {t['outcome']} | {t['seconds']:.1f} | {t['message'].replace('|', '/')} |"
              for t in s["tests"]]
    bench = s.get("benchmark") or {}
    if bench.get("records"):
        lines += ["", f"## Retrieval recall benchmark (D = {bench.get('dim')})", "",
                  "| items x texts | method | precision | runs | best (s) | median (s) | time / floor "
                  "| median / chunk | peak extra GPU memory (MiB) |", "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['items']:,} x {r['texts']:,} | {r['method']} | {r['precision']} | {r['runs']} | "
                  f"{r['best_s']:.4f} | {r.get('median_s', r['best_s']):.4f} | {r['time_over_floor']:.2f} | "
                  f"{r.get('over_chunk', float('nan')):.2f} | {r['peak_extra_mib']:,.1f} |" for r in bench["records"]]
        lines += ["", "Recalls of fp16 / bf16 against fp32: " + ", ".join(
            f"{c['size']} {c['precision']} {'equal' if c['equal_to_fp32'] else 'DIFFERENT'}"
            for c in s["recall_checks"])]
    train = s.get("train_step") or {}
    if train.get("records"):
        lines += ["", f"## C5 training step ({train.get('shapes')} shapes, {train.get('batch')} images a step)", "",
                  "| method | samples/s | x frozen_vit | step (s) | waiting for data (ms / step) "
                  "| peak extra GPU memory (MiB) |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['method']} | {r['samples_per_s']:.1f} | {r['over_frozen_vit']:.2f} | {r['step_s']:.3f} | "
                  f"{r['wait_s'] * 1e3:.1f} | {r['peak_extra_mib']:,.0f} |" for r in train["records"]]
    embed = s.get("mllm_embed") or {}
    if embed.get("results"):
        lines += ["", "## EOL embedding (benchmarks/mllm_embed.py): items/s", "",
                  "| config | dtype | set | 1-by-1 | old chunks | sorted | sorted / 1-by-1 | sorted / old |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['config']} | {r['dtype']} | {name} | {r[name]['1-by-1_per_s']:.1f} | "
                  f"{r[name]['old_per_s']:.1f} | {r[name]['sorted_per_s']:.1f} | {r[name]['sorted_ratio']:.2f} | "
                  f"{r[name]['sorted_vs_old']:.2f} |"
                  for r in embed["results"] for name in r if isinstance(r[name], dict) and "sorted_per_s" in r[name]]
    caption = s.get("caption_batch") or {}
    if caption.get("results"):
        lines += ["", "## vlr caption's generation batches (benchmarks/caption_batch.py): clips/s", "",
                  "| config | dtype | set | new tokens | 1-by-1 | chunks | sorted | sorted / 1-by-1 "
                  "| captions as 1-by-1 |", "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['config']} | {r['dtype']} | {name} | {r['new_tokens']} | {r[name]['1-by-1_per_s']:.2f} | "
                  f"{r[name]['chunks_per_s']:.2f} | {r[name]['sorted_per_s']:.2f} | {r[name]['sorted_ratio']:.2f} | "
                  f"{'yes' if r[name]['equal'] else 'NO'} |"
                  for r in caption["results"] for name in r if isinstance(r[name], dict) and "sorted_per_s" in r[name]]
    scaling = s.get("scaling") or {}
    if scaling.get("pipeline") or scaling.get("not_run"):
        workers = scaling.get("workers")
        lines += ["", f"## vlr precompute against its tower's forward rate on the GPU (benchmarks/scaling.py "
                      f"--device cuda, {'the default' if workers is None else workers} decoding workers; "
                      f"goal >= {PIPELINE_GOAL}x)", "",
                  "| medium | items, batch | forward, pre-decoded (items/s) | vlr precompute (items/s) | x forward "
                  "| x forward, less the tower's loading | cores busy (forward / precompute) |",
                  "|---|---|---|---|---|---|---|"]
        sizes = scaling.get("sizes", {})
        for media, rows in scaling.get("pipeline", {}).items():
            forward, command = rows
            n, batch = (sizes.get("images"), sizes.get("image_batch")) if media == "images" else \
                (sizes.get("videos"), sizes.get("video_batch"))
            lines.append(f"| {media} | {n}, {batch} | {forward['items_per_s']:.1f} | {command['items_per_s']:.1f} | "
                         f"{command['over_baseline']:.2f} | {command['over_baseline_less_load']:.2f} | "
                         f"{forward['cores']:.2f} / {command['cores']:.2f} |")
        lines += [f"| {media} | not measured: {why} | | | | | |" for media, why in scaling.get("not_run", {}).items()]
    for name, pkgs in s["carried"].items():
        if pkgs:
            lines += ["", f"Carried ({name}): " + ", ".join(f"{k} {v}" for k, v in sorted(pkgs.items()))]
    return "\n".join(lines) + "\n"


def summarize(outdir: Path, junit: Path | None, steps: list[dict], started: float, sites: dict[str, str]) -> dict:
    tests = []
    for path in sorted(junit.glob("*.xml")) if junit else ():
        try:
            tests += read_junit(path)
        except ET.ParseError as e:
            steps.append({"step": path.name, "status": "unreadable", "note": str(e)})
    bench_path = outdir / "retrieval_recall.json"
    bench = json.loads(bench_path.read_text()) if bench_path.is_file() else None
    checks = recall_checks(bench) if bench else []
    train_path = outdir / "train_step.json"
    train = json.loads(train_path.read_text()) if train_path.is_file() else None
    embed_path = outdir / "mllm_embed.json"
    embed = json.loads(embed_path.read_text()) if embed_path.is_file() else None
    caption_path = outdir / "caption_batch.json"
    caption = json.loads(caption_path.read_text()) if caption_path.is_file() else None
    scaling_path = outdir / "scaling.json"
    scaling = json.loads(scaling_path.read_text()) if scaling_path.is_file() else None
    problems = [f"step {st['step']}: {st['status']}" + (f" ({st['note']})" if st.get("note") else "")
                for st in steps if st["status"] != "ok"]
    problems += [f"test {t['id']}: {t['outcome']}" + (f": {t['message']}" if t["message"] else "")
                 for t in tests if t["outcome"] not in ("passed", "not run (optional)")]
    problems += [f"benchmark {c['size']}: {c['precision']} recalls differ from fp32"
                 for c in checks if not c["equal_to_fp32"]]
    problems += [f"benchmark {r['items']:,} x {r['texts']:,}: the peer's recalls differ from the engine's"
                 for r in (bench or {}).get("records", []) if r.get("same_recall_as_engine") is False]
    problems += [f"benchmark scaling: {media} not measured: {why}"
                 for media, why in (scaling or {}).get("not_run", {}).items()]
    if not tests:
        problems.append("no test ran")
    for r in (bench or {}).get("records", []):
        if not all(math.isfinite(r[k]) for k in ("best_s", "peak_extra_mib")):
            problems.append(f"benchmark {r['method']} {r['precision']}: non-finite measurement")
    return {
        "status": "passed" if not problems else "failed",
        "problems": problems,
        "machine": machine(),
        "wall_seconds": time.time() - started,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "steps": steps,
        "tests": tests,
        "benchmark": bench,
        "train_step": train,
        "mllm_embed": embed,
        "caption_batch": caption,
        "scaling": scaling,
        "recall_checks": checks,
        "carried": {name: carried(path) for name, path in sites.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--steps", type=Path, required=True, help="JSON Lines, one record per step")
    parser.add_argument("--junit", type=Path, help="folder of pytest --junitxml files")
    parser.add_argument("--started", type=float, required=True, help="start time, seconds since the epoch")
    parser.add_argument("--site", action="append", default=[], metavar="NAME=DIR",
                        help="a folder of carried packages whose versions are listed")
    args = parser.parse_args()
    steps = [json.loads(line) for line in args.steps.read_text().splitlines() if line.strip()]
    sites = dict(s.split("=", 1) for s in args.site)
    summary = summarize(args.outdir, args.junit, steps, args.started, sites)
    (args.outdir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    text = markdown(summary)
    (args.outdir / "summary.md").write_text(text)
    print(text)
    return 0 if summary["status"] == "passed" else 1


if __name__ == "__main__":
    sys.exit(main())
