"""docs/quickstart.md runs as written: its files are saved and its shell blocks run verbatim,
in a fresh folder, in subprocesses, with HF_HUB_OFFLINE=1 (nothing may be downloaded)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mmengine")
pytest.importorskip("PIL")

DOC = Path(__file__).resolve().parents[1] / "docs" / "quickstart.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks() -> tuple[dict[str, str], list[str]]:
    """The doc's files (fences with ``file=NAME``) and its shell blocks (``bash``), in order."""
    files, shell = {}, []
    for lang, info, body in FENCE.findall(DOC.read_text(encoding="utf-8")):
        name = re.search(r"\bfile=(\S+)", info)
        if name:
            files[name.group(1)] = body
        elif lang == "bash":
            shell.append(body)
    return files, shell


def test_the_doc_has_every_step():
    files, shell = blocks()
    assert {"make_data.py", "my_encoder.py", "quick.yaml", "benchmarks.yaml", "use.py"} <= set(files)
    commands = "\n".join(shell)
    for step in ("vlr precompute", "vlr train", "vlr eval", "vlr export", "python use.py"):
        assert step in commands, step
    assert "## Offline use" in DOC.read_text(encoding="utf-8")


def _bin(tmp: Path) -> Path:
    """``vlr`` and ``python`` as a user's environment has them, running this interpreter:
    ``vlr`` is a console script (its own folder first on ``sys.path``, not the current one)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    vlr = bin_dir / "vlr"
    vlr.write_text(f"#!{sys.executable}\nimport sys\nfrom vlr_plugins.cli import main\nsys.exit(main())\n")
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    for p in (vlr, python):
        p.chmod(0o755)
    return bin_dir


def test_quickstart_runs_verbatim_offline(tmp_path):
    import vlr_plugins

    files, shell = blocks()
    work = tmp_path / "work"
    work.mkdir()
    for name, text in files.items():
        (work / name).write_text(text)
    src = Path(vlr_plugins.__file__).resolve().parents[1]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PATH=f"{_bin(tmp_path)}{os.pathsep}{os.environ['PATH']}",
               # this checkout's code (`vlr precompute` imports `--encoder my_encoder:...` from the
               # current folder itself, as `python -m` does)
               PYTHONPATH=os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]))
    env.pop("VLR_DEBUG", None)
    script = "set -euo pipefail\n" + "\n".join(shell)
    out = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True,
                         timeout=900)
    shown = f"\nstdout:\n{out.stdout[-6000:]}\nstderr:\n{out.stderr[-6000:]}"
    assert out.returncode == 0, shown
    assert "48 pictures" in out.stdout, shown
    assert "torch.Size([2, 32])" in out.stdout, shown
    assert (work / "results" / "quick" / "results.json").is_file()
    assert (work / "exports" / "quick" / "model.safetensors").is_file()
    assert (work / "exports" / "quick" / "README.md").is_file()
    # the quiet console: training progress, not MMEngine's environment report and config
    assert "Epoch(train)" in out.stdout and "System environment" not in out.stdout, shown
