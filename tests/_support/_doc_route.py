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
    """``vlr``, ``python`` and ``transformers`` as a user's environment has them, running this
    interpreter: ``vlr`` and ``transformers`` are console scripts (their own folder first on
    ``sys.path``, not the current one), written as pip writes them: ``main()`` under a
    ``__main__`` guard, since a process started by ``multiprocessing``'s spawn (``transformers
    serve``'s engine, from transformers 5.25) runs the script again as its main module."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    scripts = {"vlr": "vlr_plugins.cli", "transformers": "transformers.cli.transformers"}
    for name, module in scripts.items():
        (bin_dir / name).write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import main\n"
                                    "if __name__ == '__main__':\n    sys.exit(main())\n")
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    for name in (*scripts, "python"):
        (bin_dir / name).chmod(0o755)
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


def require_transformers_serve(port: int) -> None:
    """Skip, naming what is missing, where a route's ``transformers serve`` cannot start
    (FastAPI and Uvicorn are ``transformers[serving]``'s; the route waits with ``curl``); fail
    when ``port``, which the docs' route names, is taken on this machine."""
    import importlib.util
    import shutil
    import socket

    import pytest

    missing = [m for m in ("fastapi", "uvicorn", "openai") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"`transformers serve` needs {', '.join(missing)} (pip install 'transformers[serving]')")
    if shutil.which("curl") is None:
        pytest.skip("the route waits for the server with curl, which this machine lacks")
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", port)) == 0:
            pytest.fail(f"port {port}, which the route's server listens on, is taken on this machine")


def served_chat_calls(log: Path) -> int:
    """The chat completions ``transformers serve`` answered with 200, by its log."""
    return log.read_text().count('"POST /v1/chat/completions HTTP/1.1" 200')


def port_closes(port: int, within: float = 10.0) -> bool:
    """Whether nothing listens on ``port`` within ``within`` seconds (a route's server stopped)."""
    import socket
    import time

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return True
        time.sleep(0.2)
    return False


def run_served_route(doc: Path, tag: str, port: int, tmp: Path) -> tuple[Path, subprocess.CompletedProcess, str]:
    """A route that starts ``transformers serve`` on ``port`` (:func:`require_transformers_serve`
    first): its files saved and its ``tag`` block run verbatim in ``tmp/work``; returns the folder,
    the process and what to show on failure (the output's and the server log's ends). Checks the
    route exited 0 and its trap stopped the server."""
    files, route = route_blocks(doc, tag)
    require_transformers_serve(port)
    work = tmp / "work"
    work.mkdir()
    for name, text in files.items():
        (work / name).write_text(text)
    out = run_verbatim(route, work, tmp, timeout=300, OMP_NUM_THREADS="1", HF_HUB_DISABLE_UPDATE_CHECK="1")
    log = work / "server.log"
    shown = (f"\nstdout:\n{out.stdout[-4000:]}\nstderr:\n{out.stderr[-4000:]}"
             f"\nserver.log:\n{log.read_text()[-3000:] if log.exists() else '(none)'}")
    assert out.returncode == 0, shown
    assert port_closes(port), "the route's trap did not stop its server" + shown
    return work, out, shown
