"""What the tests that run ``vlr`` under ``torchrun`` on CPU processes (gloo) share (tests only)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: the package's source, put on the processes' PYTHONPATH
SRC = str(Path(__file__).resolve().parents[2] / "src")


def require_torchrun() -> None:
    """Skip the calling test module where torch has no gloo backend or no torchrun."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip(f"torch {torch.__version__} has no gloo backend: no CPU process group for torchrun",
                    allow_module_level=True)
    pytest.importorskip("torch.distributed.run", reason="no torchrun (torch.distributed.run) in this torch")


def cpu_env() -> dict[str, str]:
    """The environment of CPU processes (also where a GPU is present), one thread each, offline,
    importing this checkout's package."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH")) if p)
    return env


def run_vlr_processes(args: list[str], processes: int, *, fails: bool = False, timeout: int = 240,
                      stderr: bool = False) -> str:
    """``vlr ARGS`` in a fresh interpreter on CPU processes: one, or ``processes`` under
    ``torchrun --standalone`` (a local rendezvous on a free port; ``--launcher pytorch``).
    Asserts it failed exactly when ``fails``; returns its stdout (and stderr, when it failed or
    with ``stderr``)."""
    import subprocess
    import sys

    argv = [sys.executable, "-m", "vlr_plugins.cli", *args]
    if processes > 1:
        argv[1:1] = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
        argv.extend(["--launcher", "pytorch"])
    out = subprocess.run(argv, capture_output=True, text=True, env=cpu_env(), timeout=timeout)
    assert (out.returncode != 0) == fails, out.stdout[-3000:] + out.stderr[-5000:]
    return out.stdout + out.stderr if fails or stderr else out.stdout


def load_checkpoint(path: str | Path) -> dict:
    """An MMEngine checkpoint, weights only."""
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def logged_rows(where: Path) -> list[dict]:
    """The logged training rows (loss and terms per step) of a run's ``scalars.json``, or of a
    work dir's only run."""
    import json

    if where.is_dir():
        (where,) = where.glob("*/vis_data/scalars.json")
    return [json.loads(line) for line in where.read_text().splitlines() if '"loss"' in line]
