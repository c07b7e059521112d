"""check_output_dir: an output folder a command cannot write is refused, naming the option, before any work;
replace_dir: a finished folder takes the place of the old one whole, or the old one stays."""

from __future__ import annotations

import os

import pytest

from vlr_plugins._io import check_output_dir
from vlr_plugins.errors import UsageError


def test_a_folder_that_is_there_or_can_be_made_passes(tmp_path):
    (tmp_path / "results").mkdir()
    check_output_dir(tmp_path / "results", "--out")
    check_output_dir(tmp_path / "new" / "deeper" / "results", "--out")
    check_output_dir(tmp_path / "store", "--out", replaced_whole=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]  # nothing was created


def test_a_file_or_a_folder_under_a_file_is_refused(tmp_path):
    (tmp_path / "notes").write_text("a file")
    with pytest.raises(UsageError, match=f"^--out: {tmp_path / 'notes'} is a file") as info:
        check_output_dir(tmp_path / "notes", "--out")
    assert info.value.option == "--out"
    with pytest.raises(UsageError, match=f"^OUT: cannot create the folder {tmp_path / 'notes' / 'a' / 'b'}: "
                                         f"{tmp_path / 'notes'} is a file"):
        check_output_dir(tmp_path / "notes" / "a" / "b", "OUT", replaced_whole=True)


def _unwritable(folder):
    """``os.access`` as on a file system where ``folder`` is read-only (root writes anywhere)."""
    real = os.access

    def access(path, mode, *args, **kwargs):
        if os.fspath(path) == os.fspath(folder) and mode & os.W_OK:
            return False
        return real(path, mode, *args, **kwargs)

    return access


def test_a_folder_that_cannot_be_written_is_refused(tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    monkeypatch.setattr(os, "access", _unwritable(locked))
    with pytest.raises(UsageError, match=f"cannot write into {locked}: the folder is not writable"):
        check_output_dir(locked, "--out")
    # a store is written beside the folder and renamed onto it: its parent must be writable
    with pytest.raises(UsageError, match=f"cannot write {locked / 'store'}: the folder {locked} is not writable"):
        check_output_dir(locked / "store", "--out", replaced_whole=True)
    with pytest.raises(UsageError, match=f"the folder {locked} is not writable"):
        check_output_dir(locked / "new" / "results", "--out")
    check_output_dir(tmp_path / "elsewhere", "--out")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        with pytest.raises(UsageError, match="not writable"):
            check_output_dir(locked / "results", "--out")
    finally:
        locked.chmod(0o755)


def test_replace_dir_puts_the_new_folder_in_place_of_the_old_one(tmp_path):
    from vlr_plugins._io import replace_dir

    out = tmp_path / "export"
    for version in ("one", "two"):
        tmp = tmp_path / f".export.{version}.tmp"
        tmp.mkdir()
        (tmp / "version.txt").write_text(version)
        replace_dir(tmp, out)
        assert not tmp.exists() and (out / "version.txt").read_text() == version
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]  # the old folder is gone, nothing aside


def test_replace_dir_puts_the_old_folder_back_when_the_new_one_cannot_be_moved(tmp_path, monkeypatch):
    from vlr_plugins import _io
    from vlr_plugins._io import replace_dir

    out, new, aside = tmp_path / "store", tmp_path / ".store.tmp", tmp_path / ".store.replaced"
    for folder, version in ((out, "old"), (new, "new")):
        folder.mkdir()
        (folder / "version.txt").write_text(version)
    real = os.replace

    def refuse_the_new_one(src, dst):
        if os.fspath(src) == os.fspath(new):
            raise OSError("no space left on device")
        return real(src, dst)

    monkeypatch.setattr(_io.os, "replace", refuse_the_new_one)
    with pytest.raises(OSError, match="no space"):
        replace_dir(new, out, aside=aside)
    assert (out / "version.txt").read_text() == "old" and not aside.exists() and new.is_dir()
    monkeypatch.setattr(_io.os, "replace", real)
    replace_dir(new, out, aside=aside)
    assert (out / "version.txt").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_staged_dir_replaces_the_folder_whole_or_leaves_it(tmp_path):
    from vlr_plugins._io import staged_dir

    out = tmp_path / "exports" / "model"
    with staged_dir(out) as tmp:
        assert tmp.is_dir() and tmp.parent == out.parent and not out.exists()
        (tmp / "a.txt").write_text("first")
    assert (out / "a.txt").read_text() == "first"
    with pytest.raises(RuntimeError, match="half-built"):
        with staged_dir(out) as tmp:
            (tmp / "a.txt").write_text("second")
            raise RuntimeError("half-built")
    assert (out / "a.txt").read_text() == "first"  # the earlier folder, untouched
    with staged_dir(out) as tmp:
        (tmp / "b.txt").write_text("third")
    assert sorted(p.name for p in out.iterdir()) == ["b.txt"]  # replaced whole, not merged
    assert sorted(p.name for p in out.parent.iterdir()) == ["model"]  # no staging folder left


def _folder(path, files=("a", "b", "c")):
    path.mkdir()
    for name in files:
        (path / name).write_text(name)
    return path


def test_delete_dir_takes_the_folder_away_whole_even_when_the_deletion_stops_halfway(tmp_path, monkeypatch):
    import shutil

    from vlr_plugins._io import delete_dir, deleted_dir_of

    work = _folder(tmp_path / ".store.partial")
    rmtree = shutil.rmtree

    def killed_halfway(path, *args, **kwargs):  # one file deleted, then the process is gone
        os.unlink(os.path.join(path, sorted(os.listdir(path))[0]))
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "rmtree", killed_halfway)
    with pytest.raises(KeyboardInterrupt):
        delete_dir(work)
    monkeypatch.setattr(shutil, "rmtree", rmtree)
    assert not work.exists()  # nothing of it is left where it was
    assert sorted(os.listdir(deleted_dir_of(work))) == ["b", "c"]
    _folder(work, ("d",))  # the next run's folder of the same name
    delete_dir(work)  # takes the leftover too
    assert sorted(os.listdir(tmp_path)) == []
    delete_dir(work)  # a missing folder: nothing to do


def test_delete_dir_ignoring_errors_still_deletes_what_it_can(tmp_path, monkeypatch):
    from vlr_plugins._io import delete_dir

    work = _folder(tmp_path / "parts")

    def refused(src, dst):
        raise PermissionError(13, "Permission denied", str(src))

    monkeypatch.setattr(os, "replace", refused)
    with pytest.raises(PermissionError):
        delete_dir(work)
    assert work.is_dir()
    delete_dir(work, ignore_errors=True)
    assert not work.exists()
