"""Atomic file writes: a reader never sees a half-written file or folder."""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_open", "atomic_write_text", "atomic_write_json", "check_output_dir", "replace_dir"]


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", **kwargs: Any) -> Iterator[IO]:
    """Open a temporary sibling of ``path``; rename it onto ``path`` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    # "x" rather than tempfile.mkstemp: mkstemp's 0600 mode would survive the rename
    if "b" not in mode:
        kwargs.setdefault("encoding", "utf-8")
    try:
        with open(tmp, mode.replace("w", "x"), **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_open(path) as f:
        f.write(text)


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def check_output_dir(path: str | os.PathLike, option: str, *, replaced_whole: bool = False) -> None:
    """Raise :class:`~vlr_plugins.errors.UsageError` (naming ``option``) unless a command
    can write the folder ``path``: it is a folder, or can be created as one, and the
    folder the files go into is writable. Call it before any work, so that hours of
    encoding do not end in "permission denied".

    ``replaced_whole``: the command writes a sibling folder and renames it onto ``path``
    (an embedding store, an export), so it is ``path``'s parent that must be writable.
    Whether an existing output may be replaced is the command's own question (its
    ``--overwrite``); this checks only the file system.
    """
    from vlr_plugins.errors import UsageError

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UsageError(option, f"{path} is a file; expected a folder to write (or one not there yet)")
    existing = path.parent if replaced_whole else path
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(option, f"cannot create the folder {path}: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        problem = (f"cannot write into {path}: the folder is not writable" if existing == path
                   else f"cannot write {path}: the folder {existing} is not writable")
        raise UsageError(option, problem)


def replace_dir(tmp: str | os.PathLike, out_dir: str | os.PathLike) -> None:
    """Move the finished folder ``tmp`` to ``out_dir``, replacing a folder already there.

    The old folder is first renamed aside and deleted only once ``tmp`` is in place, so
    ``out_dir`` holds either the old or the new contents at every moment, never a mix.
    """
    import shutil

    out_dir = Path(out_dir)
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.{uuid.uuid4().hex[:8]}.old")
        os.rename(out_dir, old)
        os.rename(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, out_dir)
