"""An embedding store written so that a killed run loses little and a rerun finishes it.

:class:`ResumableEmbeddingStoreWriter` writes the same store as
:class:`~vlr_plugins.data.EmbeddingStoreWriter` (``index.json`` and safetensors shards), but
makes rows durable as it goes, in a work folder with a fixed name beside the store::

    stores/.videos.partial/             the work folder of stores/videos
        partial.json                    {"format": "vlr-embedding-store-partial", "dim", "dtype", "meta"}
        embeddings-00000.safetensors    a part: "embeddings" (k, D), its k ids in the metadata entry "ids"
        embeddings-00001.safetensors    ...

Each part is written to a temporary name, synced and renamed, so it is there whole or not at
all. Closing writes ``index.json`` into the work folder (the parts are the shards), removes
``partial.json`` and renames the folder onto ``stores/videos``; a store already there is
first renamed to ``stores/.videos.replaced`` and deleted once the new one is in place. A
rerun finds the work folder by its name and finishes or undoes what a kill interrupted.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from vlr_plugins._io import delete_dir, deleted_dir_of, fsync_dir, replace_dir
from vlr_plugins.data.embedding_store import (
    _DTYPES,
    _INDEX,
    _SAFETENSORS_DTYPES,
    _TENSOR,
    STORE_FORMAT,
    STORE_VERSION,
    EmbeddingStore,
    _checked_rows,
    _dtype_name,
    _is_store,
    check_store_target,
)
from vlr_plugins.errors import ConfigError, DataFormatError, OutputExistsError, _type_name

__all__ = [
    "ResumableEmbeddingStoreWriter",
    "StoreProgress",
    "check_resumable_target",
    "read_store_progress",
    "work_dir_of",
]

_WORK_FORMAT = "vlr-embedding-store-partial"
_HEADER = "partial.json"
_IDS_KEY = "ids"  # the safetensors metadata entry of a part that lists its rows' ids
_PART = re.compile(r"^embeddings-(\d{5,})\.safetensors$")
_SAFETENSORS_TMP = re.compile(r"^\.tmp[0-9A-Za-z]{6}$")
_SEED_ROWS = 65_536  # rows per part when a finished store's rows are carried into a resumed run


def _named(out_dir: str | os.PathLike[str]) -> Path:
    out = Path(out_dir)
    return out if out.name else Path(os.path.abspath(out))


def work_dir_of(out_dir: str | os.PathLike[str]) -> Path:
    """The folder where :class:`ResumableEmbeddingStoreWriter` keeps the unfinished store
    ``out_dir``: ``.NAME.partial`` beside it (``stores/msrvtt`` -> ``stores/.msrvtt.partial``)."""
    out = _named(out_dir)
    return out.with_name(f".{out.name}.partial")


def _replaced_dir_of(out_dir: str | os.PathLike[str]) -> Path:
    out = _named(out_dir)
    return out.with_name(f".{out.name}.replaced")


def _durable_replace(tmp: Path, path: Path) -> None:
    """Rename the finished file ``tmp`` onto ``path`` once its bytes are on disk."""
    with open(tmp, "rb") as f:  # written by safetensors, which does not fsync
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _write_json_durably(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False)
    _durable_replace(tmp, path)


def _is_stray(entry: Path) -> bool:
    """A temporary file a killed run left in a work folder: a part or a JSON file half written
    (``.NAME.tmp``), or safetensors' own temporary file, which it writes beside its target and
    renames onto it (``.tmp`` and six letters or digits: Rust's ``tempfile``)."""
    name = entry.name
    return ((name.startswith(".") and name.endswith(".tmp")) or bool(_SAFETENSORS_TMP.match(name))) \
        and entry.is_file()


def _foreign_entries(work: Path) -> list[str]:
    return sorted(e.name for e in work.iterdir()
                  if e.name not in (_HEADER, _INDEX) and not _is_stray(e)
                  and not (_PART.match(e.name) and e.is_file()))


def _check_ours(out: Path) -> None:
    """Refuse when the work folder or the replaced-store folder of ``out`` holds anything vlr did
    not write there: they are deleted at the end of a run."""
    work, old = work_dir_of(out), _replaced_dir_of(out)
    if work.exists() and not work.is_dir():
        raise OutputExistsError(f"{work} is a file; it is where the unfinished embedding store {out} is "
                                "kept: move it away")
    if work.is_dir():
        foreign = _foreign_entries(work)
        if foreign:
            raise OutputExistsError(
                f"{work} holds {', '.join(foreign[:5])}, which vlr did not write; it is the work folder of "
                f"the embedding store {out}, deleted when the store is finished: move those files away")
    if old.exists() and not (old.is_dir() and not _foreign_entries(old)):  # a store, maybe half deleted
        raise OutputExistsError(f"{old} is not an embedding store; it is where the store {out} is moved "
                                "while it is replaced: move it away")


@dataclass
class _Work:
    """What a work folder holds: its settings (``None``: a run killed as it began), whether it
    was being moved into place (``index.json`` written), and its parts, in order."""

    header: dict[str, Any] | None
    complete: bool
    parts: list[tuple[int, str, list[str]]]  # (number, file name, ids)


def _read_settings(path: Path, fmt: str) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as e:
        raise DataFormatError(path, f"cannot read it: {e}; delete the folder to start over") from None
    if not isinstance(raw, dict) or raw.get("format") != fmt:
        raise DataFormatError(path, f"expected a {fmt} file; delete the folder to start over")
    dim, dtype, meta = raw.get("dim"), raw.get("dtype"), raw.get("meta", {})
    bad_dim = isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0
    if bad_dim or dtype not in _DTYPES or not isinstance(meta, dict):
        raise DataFormatError(path, f"expected a positive 'dim', a 'dtype' in {sorted(_DTYPES)} and an object "
                                    f"'meta', found {dim!r}, {dtype!r}, {_type_name(meta)}")
    return {"dim": dim, "dtype": dtype, "meta": meta}


def _read_part(path: Path, dim: int, dtype: str) -> list[str]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            ids = json.loads((f.metadata() or {}).get(_IDS_KEY, "null"))
            piece = f.get_slice(_TENSOR)
            shape, stored = list(piece.get_shape()), piece.get_dtype()
    except Exception as e:  # a damaged file: safetensors raises its own error types
        raise DataFormatError(path, f"cannot read this part of an unfinished embedding store ({e}); "
                                    "delete it and resume, or start over") from e
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise DataFormatError(path, f"expected the ids of its rows in its metadata entry {_IDS_KEY!r}")
    if shape != [len(ids), dim] or stored != _SAFETENSORS_DTYPES[dtype]:
        raise DataFormatError(path, f"expected {_TENSOR!r} of shape {[len(ids), dim]} and dtype "
                                    f"{_SAFETENSORS_DTYPES[dtype]}, found {shape} and {stored}")
    return ids


def _read_work(work: Path) -> _Work:
    header_file = next((work / n for n in (_HEADER, _INDEX) if (work / n).is_file()), None)
    header = None
    if header_file is not None:
        header = _read_settings(header_file, _WORK_FORMAT if header_file.name == _HEADER else STORE_FORMAT)
    names = sorted((int(m[1]), e.name) for e in work.iterdir() if (m := _PART.match(e.name)) and e.is_file())
    if header is None:
        if names:
            raise DataFormatError(work, f"holds {len(names)} parts of an embedding store but no {_HEADER}; "
                                        "delete the folder to start over")
        return _Work(None, False, [])
    parts, first = [], {}
    for number, name in names:
        ids = _read_part(work / name, header["dim"], header["dtype"])
        for i in ids:
            if i in first:
                raise DataFormatError(work / name, f"id {i!r} is already in {first[i]}; delete the folder to "
                                                   "start over")
            first[i] = name
        parts.append((number, name, ids))
    return _Work(header, (work / _INDEX).is_file(), parts)


def _settings_differ(stored: dict[str, Any], dim: int | None, dtype: torch.dtype | str | None,
                     meta: dict[str, Any] | None) -> list[str]:
    out = []
    if dim is not None and dim != stored["dim"]:
        out.append(f"dim: {stored['dim']} there, {dim} now")
    if dtype is not None and _dtype_name(dtype) != stored["dtype"]:
        out.append(f"dtype: {stored['dtype']} there, {_dtype_name(dtype)} now")
    if meta is not None:
        asked = json.loads(json.dumps(meta))  # as index.json will hold it: tuples become lists
        for key in sorted(set(stored["meta"]) | set(asked), key=str):
            if stored["meta"].get(key) != asked.get(key):
                out.append(f"{key}: {stored['meta'].get(key)!r} there, {asked.get(key)!r} now")
    return out


@dataclass(frozen=True)
class StoreProgress:
    """What earlier runs left where a store is to be written: a finished store, the parts an
    interrupted :class:`ResumableEmbeddingStoreWriter` made durable, or both.

    Attributes:
        out_dir: the store's folder.
        ids: every id with a row, finished or not (each once).
        dim, dtype, meta: the settings those rows were written with (``dtype`` a name).
        stored: rows in the finished store at ``out_dir``.
        unfinished: rows only in the work folder (:func:`work_dir_of`), not yet in a store.
        finished: every row is in the finished store at ``out_dir`` and no earlier run left
            anything beside it to finish or clean up.
    """

    out_dir: Path
    ids: tuple[str, ...]
    dim: int
    dtype: str
    meta: dict[str, Any]
    stored: int
    unfinished: int
    finished: bool

    def differences(self, *, dim: int | None = None, dtype: torch.dtype | str | None = None,
                    meta: dict[str, Any] | None = None) -> list[str]:
        """How ``dim``, ``dtype`` and ``meta`` differ from the stored settings, one phrase each
        (``"frames: 8 there, 16 now"``); empty when a run with them may add to these rows."""
        return _settings_differ({"dim": self.dim, "dtype": self.dtype, "meta": self.meta}, dim, dtype, meta)


def read_store_progress(out_dir: str | os.PathLike[str]) -> StoreProgress | None:
    """The rows earlier runs left for the store ``out_dir`` (read only; ``None``: none).

    Counts the finished store at ``out_dir`` and the durable parts of an interrupted
    :class:`ResumableEmbeddingStoreWriter` in its work folder, including a run killed while
    moving the finished store into place. A damaged part or settings file is a
    :class:`DataFormatError` naming it.
    """
    out = _named(out_dir)
    work, old = work_dir_of(out), _replaced_dir_of(out)
    _check_ours(out)
    state = _read_work(work) if work.is_dir() else None
    if state is not None and state.header is None:
        state = None  # a run killed as it began: nothing written
    store_dir = out if _is_store(out) else None
    if store_dir is None and not out.exists() and _is_store(old) and not (state and state.complete):
        store_dir = old  # killed while replacing the store, before the new one was in place: the old one stands
    store = EmbeddingStore(store_dir) if store_dir is not None else None
    if store is None and state is None:
        return None
    if store is not None and state is not None:
        stored = {"dim": store.dim, "dtype": _dtype_name(store.dtype), "meta": store.meta}
        differ = _settings_differ(stored, state.header["dim"], state.header["dtype"], state.header["meta"])
        if differ:
            raise DataFormatError(work, f"holds rows written with other settings than the store {out} "
                                        f"({'; '.join(differ)}); delete one of them")
    settings = state.header if state is not None else {
        "dim": store.dim, "dtype": _dtype_name(store.dtype), "meta": store.meta}
    ids = list(store.ids) if store is not None else []
    seen = set(ids)
    for _, _, part_ids in state.parts if state is not None else []:
        ids.extend(i for i in part_ids if i not in seen)
    stored = len(store) if store is not None else 0
    finished = store_dir == out and not work.exists() and not old.exists()
    return StoreProgress(out, tuple(ids), settings["dim"], settings["dtype"], settings["meta"], stored,
                         len(ids) - stored, finished)


def check_resumable_target(
    out_dir: str | os.PathLike[str],
    *,
    resume: bool = False,
    overwrite: bool = False,
    dim: int | None = None,
    dtype: torch.dtype | str | None = None,
    meta: dict[str, Any] | None = None,
    resume_flag: str = "resume=True",
    overwrite_flag: str = "overwrite=True",
) -> StoreProgress | None:
    """Raise unless a :class:`ResumableEmbeddingStoreWriter` may write ``out_dir`` with these
    settings; returns the rows it will keep (``None``: it starts from nothing).

    - A file, or a folder that is not a store, at ``out_dir`` (or foreign files in its work
      folder) is never written: :class:`~vlr_plugins.errors.OutputExistsError`.
    - Rows already there (a finished store, an interrupted run's parts) need ``resume`` (keep
      them, add the rest) or ``overwrite`` (start over); else ``OutputExistsError``, whose
      message names ``resume_flag`` and ``overwrite_flag`` (``vlr precompute`` says
      ``--resume`` / ``--overwrite``).
    - With ``resume``, rows written with another ``dim``, ``dtype`` or ``meta`` (encoder,
      frames, sampler...) are a :class:`~vlr_plugins.errors.ConfigError` naming each
      difference. Settings given as ``None`` are not compared.

    Reads only; call it before any work.
    """
    if resume and overwrite:
        raise ValueError(f"{resume_flag} and {overwrite_flag} exclude each other: resume keeps the rows "
                         "already written, overwrite discards them")
    out = _named(out_dir)
    check_store_target(out, overwrite=True, flag=overwrite_flag)  # refuses a file or a folder that is not a store
    _check_ours(out)
    if overwrite:
        return None
    progress = read_store_progress(out)
    if progress is None or not progress.ids:
        return None
    if not resume:
        if progress.unfinished:
            raise OutputExistsError(
                f"an interrupted run left {progress.unfinished} embedding{'s' if progress.unfinished != 1 else ''} "
                f"for {out} in {work_dir_of(out)}; "
                f"pass {resume_flag} to finish it, or {overwrite_flag} to start over")
        raise OutputExistsError(f"an embedding store already exists at {out}; pass {resume_flag} to add the "
                                f"ids it lacks, or {overwrite_flag} to replace it")
    differ = progress.differences(dim=dim, dtype=dtype, meta=meta)
    if differ:
        raise ConfigError(f"cannot resume the embedding store {out}: its {len(progress.ids)} rows were written "
                          f"with other settings ({'; '.join(differ)}); use the same settings, or pass "
                          f"{overwrite_flag} to start over")
    return progress


def _finish_interrupted_close(out: Path) -> None:
    """Complete or undo the move of a store into place that a killed run left half done."""
    work, old = work_dir_of(out), _replaced_dir_of(out)
    if not old.exists():
        return
    if not out.exists() and (work / _INDEX).is_file():
        os.replace(work, out)  # the new store was finished: put it in place
    elif not out.exists():
        os.replace(old, out)  # the new store was not finished: the old one stays
        fsync_dir(out.parent)
        return
    fsync_dir(out.parent)
    shutil.rmtree(old)


class ResumableEmbeddingStoreWriter:
    """Writes an :class:`EmbeddingStore` that survives being killed: what is written is kept,
    and a rerun with ``resume=True`` adds only the ids not yet there.

    Rows go to a work folder beside ``out_dir`` (``.NAME.partial``, :func:`work_dir_of`) in
    small safetensors parts, each holding its rows' ids in its metadata and made durable by
    an atomic rename as soon as ``flush_rows`` rows are pending or ``flush_seconds`` have
    passed since the last part. A kill (even ``kill -9``) loses at most the rows not yet in
    a part. :meth:`close` writes ``index.json`` into the work folder and moves it onto
    ``out_dir``; the parts become the store's shards. A rerun finds the work folder by its
    name: every state a kill can leave (a part half written, the store half moved into
    place) is finished or undone there, so the store ends with exactly one row per id and
    nothing else is left behind.

    Compared with :class:`EmbeddingStoreWriter`, which writes all or nothing: use this one
    for work that takes hours (``vlr precompute --videos``).

    Args:
        out_dir: the store directory to create.
        dim: embedding width ``D``.
        dtype: storage dtype, ``torch.float32`` or ``torch.float16``.
        meta: JSON-serialisable settings the rows were made with (encoder, frames, sampler...);
            a resumed run must give the same (:func:`check_resumable_target`).
        overwrite: discard what earlier runs left (a finished store is replaced on :meth:`close`).
        resume: keep what earlier runs left (the work folder's parts, and the rows of a finished
            store at ``out_dir``) and add to it; :attr:`ids` lists the rows already there.
            Without ``resume`` or ``overwrite``, rows already there are refused.
        flush_rows, flush_seconds: when pending rows become a durable part.

    Used as a context manager, an exception inside the ``with`` makes the pending rows durable
    and leaves the work folder for a rerun with ``resume=True``; :meth:`discard` deletes it.

    Example::

        >>> with ResumableEmbeddingStoreWriter("emb/videos", dim=512, resume=True) as w:  # doctest: +SKIP
        ...     todo = [v for v in videos if v not in w]
        ...     for batch in chunks(todo):
        ...         w.add(batch, encode(batch))
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        dim: int,
        *,
        dtype: torch.dtype = torch.float32,
        meta: dict[str, Any] | None = None,
        overwrite: bool = False,
        resume: bool = False,
        flush_rows: int = 256,
        flush_seconds: float = 30.0,
    ) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"dim must be a positive integer, found {dim!r}")
        if isinstance(flush_rows, bool) or not isinstance(flush_rows, int) or flush_rows <= 0:
            raise ValueError(f"flush_rows must be a positive integer, found {flush_rows!r}")
        if not flush_seconds > 0:
            raise ValueError(f"flush_seconds must be positive, found {flush_seconds!r}")
        self.out_dir = _named(out_dir)
        self.work_dir = work_dir_of(self.out_dir)
        self.dim = dim
        self.dtype_name = _dtype_name(dtype)
        self.dtype = _DTYPES[self.dtype_name]
        self.meta = dict(meta or {})
        try:
            json.dumps(self.meta)
        except (TypeError, ValueError) as e:
            raise TypeError(f"meta must be JSON-serialisable: {e}") from None
        self.flush_rows = flush_rows
        self.flush_seconds = float(flush_seconds)
        progress = check_resumable_target(self.out_dir, resume=resume, overwrite=overwrite, dim=dim,
                                          dtype=dtype, meta=self.meta)
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(deleted_dir_of(self.work_dir), ignore_errors=True)  # what a killed deletion left
        _finish_interrupted_close(self.out_dir)
        self._parts: list[tuple[str, int]] = []
        self._ids: list[str] = []
        self._seen: set[str] = set()
        self._next = 0
        keep = progress is not None
        if self.work_dir.is_dir() and not keep:
            delete_dir(self.work_dir)  # discarded (overwrite), or a run killed before its first part
        if self.work_dir.is_dir():
            self._load_work()
        else:
            self._create_work()
        if keep and _is_store(self.out_dir):
            self._carry_over(EmbeddingStore(self.out_dir))
        self._pending: list[torch.Tensor] = []
        self._pending_ids: list[str] = []
        self._pending_rows = 0
        self._last_flush = time.monotonic()
        self._state = "open"

    def _create_work(self) -> None:
        self.work_dir.mkdir()
        self._write_header()
        fsync_dir(self.work_dir.parent)

    def _write_header(self) -> None:
        _write_json_durably(self.work_dir / _HEADER, {"format": _WORK_FORMAT, "version": STORE_VERSION,
                                                      "dim": self.dim, "dtype": self.dtype_name, "meta": self.meta})

    def _load_work(self) -> None:
        state = _read_work(self.work_dir)
        for entry in self.work_dir.iterdir():
            if _is_stray(entry):
                entry.unlink()
        if state.header is None:
            delete_dir(self.work_dir)
            self._create_work()
            return
        if not (self.work_dir / _HEADER).is_file():
            self._write_header()
        (self.work_dir / _INDEX).unlink(missing_ok=True)  # a run killed while closing: this one closes it again
        for number, name, ids in state.parts:
            self._parts.append((name, len(ids)))
            self._ids.extend(ids)
            self._seen.update(ids)
            self._next = number + 1

    def _carry_over(self, store: EmbeddingStore) -> None:
        """Copy the rows of the finished store at ``out_dir`` that the work folder lacks."""
        missing = [i for i in store.ids if i not in self._seen]
        for start in range(0, len(missing), _SEED_ROWS):
            ids = missing[start : start + _SEED_ROWS]
            self._write_part(ids, store.get(ids).to(self.dtype))
            self._ids.extend(ids)
            self._seen.update(ids)
        store.close()

    @property
    def ids(self) -> tuple[str, ...]:
        """Every id with a row: kept from earlier runs, then added, in row order."""
        return tuple(self._ids)

    def __contains__(self, id: object) -> bool:
        return id in self._seen

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, ids: Sequence[str], emb: torch.Tensor) -> None:
        """Append rows. ``ids``: n distinct strings not yet in the store; ``emb``: (n, D)."""
        if self._state != "open":
            raise RuntimeError(f"this ResumableEmbeddingStoreWriter for {self.out_dir} is {self._state}")
        ids, emb, batch = _checked_rows(ids, emb, self.dim, self.dtype, self._seen,
                                        "ResumableEmbeddingStoreWriter.add")
        self._ids.extend(ids)
        self._seen.update(batch)
        self._pending.append(emb)
        self._pending_ids.extend(ids)
        self._pending_rows += len(ids)
        while self._pending_rows >= self.flush_rows:
            self._flush(self.flush_rows)
        if self._pending_rows and time.monotonic() - self._last_flush >= self.flush_seconds:
            self._flush(self._pending_rows)

    def flush(self) -> None:
        """Make every pending row durable now."""
        if self._pending_rows:
            self._flush(self._pending_rows)

    def _flush(self, rows: int) -> None:
        block = torch.cat(self._pending) if len(self._pending) > 1 else self._pending[0]
        part, rest = block[:rows].contiguous(), block[rows:]
        self._write_part(self._pending_ids[:rows], part)
        self._pending = [rest.clone()] if len(rest) else []
        self._pending_ids = self._pending_ids[rows:]
        self._pending_rows = len(rest)
        self._last_flush = time.monotonic()

    def _write_part(self, ids: list[str], emb: torch.Tensor) -> None:
        from safetensors.torch import save_file

        name = f"embeddings-{self._next:05d}.safetensors"
        tmp = self.work_dir / f".{name}.tmp"
        save_file({_TENSOR: emb}, str(tmp), metadata={_IDS_KEY: json.dumps(ids, ensure_ascii=False)})
        _durable_replace(tmp, self.work_dir / name)
        self._parts.append((name, len(ids)))
        self._next += 1

    def close(self) -> Path:
        """Make the pending rows durable, write ``index.json`` and move the store into place."""
        if self._state == "closed":
            return self.out_dir
        if self._state != "open":
            raise RuntimeError(f"this ResumableEmbeddingStoreWriter for {self.out_dir} was {self._state}")
        try:
            self.flush()
            ids = list(self._ids)
            _write_json_durably(self.work_dir / _INDEX, {
                "format": STORE_FORMAT, "version": STORE_VERSION, "dim": self.dim, "dtype": self.dtype_name,
                "count": len(ids), "shards": [{"file": f, "count": n} for f, n in self._parts],
                "ids": ids, "meta": self.meta})
            (self.work_dir / _HEADER).unlink()
            self._move_into_place()
        except BaseException:
            self._state = "interrupted"
            raise
        self._state = "closed"
        return self.out_dir

    def _move_into_place(self) -> None:
        check_store_target(self.out_dir, overwrite=True)  # something else may have appeared there since
        # the fixed aside name lets a rerun finish a move a kill interrupted (_finish_interrupted_close)
        replace_dir(self.work_dir, self.out_dir, aside=_replaced_dir_of(self.out_dir))

    def interrupt(self) -> None:
        """Make the pending rows durable and stop: the work folder stays for a run with
        ``resume=True``. Does nothing once the writer is closed or discarded."""
        if self._state in ("open", "interrupted"):
            self._state = "interrupted"
            self.flush()

    def discard(self) -> None:
        """Delete the work folder and everything in it; ``out_dir`` is left as it was."""
        self._state = "discarded"
        self._pending, self._pending_ids, self._pending_rows = [], [], 0
        delete_dir(self.work_dir, ignore_errors=True)

    def __enter__(self) -> ResumableEmbeddingStoreWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.interrupt()
