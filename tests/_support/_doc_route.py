"""Running a docs page's commands verbatim, as a user's shell would (tests only)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

#: a fenced block: language, the rest of its info line, its body
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def route_blocks(doc: Path, tag: str) -> tuple[dict[str, str], str]:
    """A docs page's files (fenced blocks with ``file=NAME``: ``{NAME: text}``) and its one
    ``bash`` block tagged ``tag`` (the route a test runs verbatim)."""
    files, route = {}, []
    for lang, info, body in FENCE.findall(doc.read_text(encoding="utf-8")):
        name = re.search(r"\bfile=(\S+)", info)
        if name:
            files[name.group(1)] = body
        elif lang == "bash" and tag in info:
            route.append(body)
    assert len(route) == 1, f"one {tag} block in {doc.name}"
    return files, route[0]


def user_bin(tmp: Path) -> Path:
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


def run_verbatim(script: str, work: Path, tmp: Path, timeout: int = 900, **env_vars: str) -> subprocess.CompletedProcess:
    """``script`` under ``bash -c 'set -euo pipefail; ...'`` in ``work``, offline (HF_HUB_OFFLINE=1),
    with ``vlr`` / ``python`` of this interpreter first on PATH and this checkout's package on
    PYTHONPATH."""
    import vlr_plugins

    src = Path(vlr_plugins.__file__).resolve().parents[1]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PATH=f"{user_bin(tmp)}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]), **env_vars)
    env.pop("VLR_DEBUG", None)
    return subprocess.run(["bash", "-c", "set -euo pipefail\n" + script], cwd=work, env=env, capture_output=True,
                          text=True, timeout=timeout)
