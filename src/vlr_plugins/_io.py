"""Atomic file writes: a reader never sees a half-written file or folder."""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_open", "atomic_write_text", "atomic_write_json", "check_output_dir", "delete_dir",
           "deleted_dir_of", "fsync_dir", "read_yaml",
           "replace_dir", "safe_yaml_loader", "staged_dir"]


def safe_yaml_loader() -> type:
    """PyYAML's safe loader, in C (libyaml, ~10x faster) where PyYAML was built with it: the
    same documents load to the same plain types, and the same errors (``yaml.YAMLError``)."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: str | os.PathLike) -> Any:
    """The document in the YAML file ``path``, loaded safely (:func:`safe_yaml_loader`)."""
    import yaml

    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=safe_yaml_loader())  # noqa: S506 - a safe loader


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


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename or a new file in the folder ``path`` durable (where the file system
    allows it: some refuse to open or sync a folder, which is then left as it is)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """Put every file below ``root`` and every folder entry on disk (safetensors and
    ``save_pretrained`` write without syncing); links are left alone."""
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(folder)


def deleted_dir_of(folder: str | os.PathLike) -> Path:
    """Where :func:`delete_dir` moves ``folder`` to delete it: ``.NAME.deleting`` beside it."""
    folder = Path(folder)
    return folder.with_name(f".{folder.name}.deleting")


def delete_dir(folder: str | os.PathLike, *, ignore_errors: bool = False) -> None:
    """Delete the folder ``folder`` so that a kill at any moment leaves all of it or none of it
    where it was: it is first renamed to :func:`deleted_dir_of` (one atomic step, made durable),
    then deleted there. ``shutil.rmtree`` alone, killed halfway, leaves some of its files (a
    store's parts without the file that says what they are). What a kill leaves at the
    deleted name is deleted by the next call for the same folder; nothing reads it. A missing
    ``folder`` is nothing to do. ``ignore_errors``: where the folder cannot be moved or
    deleted, delete what can be and go on (for clean-ups after the work is done)."""
    import shutil

    folder = Path(folder)
    trash = deleted_dir_of(folder)
    try:
        if trash.is_dir():
            shutil.rmtree(trash)
        if not folder.exists():
            return
        os.replace(folder, trash)
        fsync_dir(folder.parent)
        shutil.rmtree(trash)
    except OSError:
        if not ignore_errors:
            raise
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(trash, ignore_errors=True)


def replace_dir(tmp: str | os.PathLike, out_dir: str | os.PathLike, *,
                aside: str | os.PathLike | None = None) -> None:
    """Move the finished folder ``tmp`` to ``out_dir``, replacing a folder already there.

    The old folder is first renamed to ``aside`` (default: a hidden sibling with a random
    name) and deleted only once ``tmp`` is in place, so ``out_dir`` holds either the old
    or the new contents at every moment, never a mix; if ``tmp`` cannot be moved, the old
    folder is put back. ``tmp``'s files are synced before the first rename and each rename
    after it, so a crash leaves one of those states on disk, with whole files. A fixed
    ``aside`` lets a rerun finish a replacement a kill interrupted (the resumable store
    does). A failure to delete the old folder once the new one is in place is ignored.
    """
    import shutil

    tmp, out_dir = Path(tmp), Path(out_dir)
    _fsync_tree(tmp)
    parent = out_dir.parent
    if not out_dir.exists():
        os.replace(tmp, out_dir)
        fsync_dir(parent)
        return
    old = Path(aside) if aside is not None else out_dir.with_name(f".{out_dir.name}.{uuid.uuid4().hex[:8]}.old")
    os.replace(out_dir, old)
    fsync_dir(parent)
    try:
        os.replace(tmp, out_dir)
    except BaseException:
        os.replace(old, out_dir)
        raise
    fsync_dir(parent)
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def staged_dir(out_dir: str | os.PathLike) -> Iterator[Path]:
    """A new hidden folder beside ``out_dir`` to build a whole folder in (an export): when the
    block ends it replaces ``out_dir`` (:func:`replace_dir`); if the block raises, it is
    removed and ``out_dir`` is left as it was."""
    import shutil

    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.with_name(f".{out_dir.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    tmp.mkdir()
    try:
        yield tmp
        replace_dir(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
