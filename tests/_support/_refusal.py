"""The bad-input catalogue's one assertion: a command refuses the input the way a user should see it.

A refusal is exit status 2, no traceback, the last line of stderr an ``error:`` (or, for
an option argparse itself rejects, a ``usage:`` block whose message names the option),
every location string the case names in that message, and nothing left behind: no path of
``leaves`` exists afterwards (files the command would have written, half-written or not).
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterable, Sequence
from pathlib import Path


def run_vlr(argv: Sequence[str], cwd: str | os.PathLike | None = None) -> tuple[int, str, str]:
    """``vlr ARGV`` in this process: (exit status, stdout, stderr)."""
    from vlr_plugins.cli import main

    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in argv])
            except SystemExit as e:  # argparse's own refusals
                code = e.code if isinstance(e.code, int) else 2
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


def assert_refused(argv: Sequence[str], *where: str, leaves: Iterable[str | os.PathLike] = (),
                   cwd: str | os.PathLike | None = None) -> str:
    """Run ``vlr ARGV`` and check it refused as a user should see it; returns stderr."""
    code, out, err = run_vlr(argv, cwd)
    shown = f"\nstdout:\n{out}\nstderr:\n{err}"
    assert code == 2, f"exit status {code}, expected 2{shown}"
    assert "Traceback" not in err and "Traceback" not in out, f"a traceback was printed{shown}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, f"nothing on stderr{shown}"
    assert lines[-1].startswith(("error:", "vlr: error:")) or "usage:" in err, f"no error line{shown}"
    message = err
    for w in where:
        assert w in message, f"{w!r} is not named in the message{shown}"
    for p in leaves:
        assert not Path(p).exists(), f"{p} was left behind{shown}"
    return err


# ---------------------------------------------------------------- cases that write their own files

def fill(text: str, places: dict[str, str]) -> str:
    """``text`` with every ``{key}`` of ``places`` replaced (case tables name paths this way)."""
    for key, value in places.items():
        text = text.replace("{" + key + "}", value)
    return text


def write_files(root: Path, files: dict[str, object], places: dict[str, str]) -> None:
    """``files``: relative path -> text, bytes, ``None`` (a folder) or ``fn(path, places)``."""
    for name, content in files.items():
        path = root / fill(name, places)
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if callable(content):
            content(path, places)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(fill(content, places), encoding="utf-8")


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path below ``root`` with its size and modification time: a case must not change it."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}
