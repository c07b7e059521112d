"""Every chat answer on disk, keyed by what was asked: a rerun costs nothing, and a killed
run keeps every answer it had received."""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vlr_plugins.errors import UserError

__all__ = ["ChatCache", "cache_key"]


def cache_key(model: str, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of ``(model, messages, sampling params)`` as canonical JSON.

    Key order inside the mappings does not matter; everything else does (a changed prompt,
    a second turn, another temperature or ``max_tokens`` is another request). The endpoint's
    URL is not part of the key: the same model name served elsewhere shares answers.
    """
    canonical = json.dumps({"model": model, "messages": list(messages), "params": dict(params)},
                           sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class ChatCache:
    """Answers of chat requests in one SQLite file, written as each answer arrives.

    Every :meth:`put` returns once its answer is committed (WAL mode), so a process killed
    with ``kill -9`` loses only the calls that were still in flight; several threads and
    several processes (SQLite's file locks, waiting up to ``timeout`` seconds) may share
    one file. Answers stored by several threads at once are committed together ("group
    commit": the first thread to arrive writes, and the next one writes every answer that
    came while it did, in one transaction), and reads have a connection of their own, so
    64 calls side by side do not queue behind one lock per answer. Each row keeps the request (model, messages, params)
    next to the answer, so the file can be read to see what a judge was asked.

    The file is created with the first answer stored, so that a run which received none
    (an endpoint down, a wrong URL) leaves no empty cache behind; a file already there is
    opened, and refused if it is not a cache, at once.

    The cache never holds an API key: keys are not part of a request.

    Example::

        >>> cache = ChatCache(tmp_path / "llm-cache.sqlite")  # doctest: +SKIP
        >>> key = cache_key("judge", [{"role": "user", "content": "hi"}], {"temperature": 0})
        >>> cache.get(key) is None  # doctest: +SKIP
        True
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 60.0) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self._lock = threading.Lock()  # the writing connection
        self._db: sqlite3.Connection | None = None
        self._read_lock = threading.Lock()  # the reading connection
        self._reader: sqlite3.Connection | None = None
        # group commit: the rows waiting for the next transaction, and whether one is being written
        self._queue = threading.Condition(threading.Lock())
        self._open_batch: _Batch | None = None
        self._writing = False
        if self.path.exists():  # a file that is not a cache is refused now, not at the first answer
            self._connect()
        else:
            self._check_creatable()

    def _check_creatable(self) -> None:
        """Refuse now a path where the file could not be created at the first answer."""
        existing = self.path.parent
        while not existing.exists() and existing.parent != existing:
            existing = existing.parent
        if not existing.is_dir():
            raise UserError(f"{self.path}: cannot create the chat cache there: {existing} is a file")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise UserError(f"{self.path}: cannot create the chat cache there: {existing} is not writable")

    def _connect(self) -> sqlite3.Connection:
        """The writing connection, opened (and the file created) on first need: a run that
        receives no answer leaves no file behind. Called with ``_lock`` held, or from ``__init__``."""
        if self._db is None:
            self._db = self._opened()
        return self._db

    def _connect_reader(self) -> sqlite3.Connection:
        """The reading connection (WAL: reads wait for no write). Called with ``_read_lock`` held."""
        if self._reader is None:
            self._reader = self._opened()
        return self._reader

    def _opened(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # several processes opening a new file at once: switching it to WAL can fail at once
        # with "database is locked" (SQLite does not wait there), so the opening is retried
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return self._open(self.timeout)
            except sqlite3.OperationalError as e:
                if not _is_busy(e):
                    raise self._not_a_cache(e) from None
                if time.monotonic() >= deadline:
                    raise UserError(f"{self.path}: the chat cache stayed locked by another process for "
                                    f"{self.timeout:g} s ({e}); is another run writing it?") from None
                time.sleep(random.uniform(0.01, 0.1))
            except sqlite3.DatabaseError as e:
                raise self._not_a_cache(e) from None

    def _open(self, timeout: float) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=timeout, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            # WAL + NORMAL: a commit survives the process being killed (not a power cut)
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, "
                       "request TEXT NOT NULL, answer TEXT NOT NULL, created REAL NOT NULL)")
        except BaseException:
            db.close()
            raise
        return db

    def _not_a_cache(self, e: sqlite3.DatabaseError) -> UserError:
        return UserError(f"{self.path}: not a chat cache (an SQLite file was expected: {e}); "
                         "give another --cache path or remove the file")

    def get(self, key: str) -> str | None:
        """The answer stored under ``key``, or ``None``."""
        with self._read_lock:
            if self._reader is None and not self.path.exists():  # nothing stored yet (by any process)
                return None
            row = self._connect_reader().execute("SELECT answer FROM answers WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def put(self, key: str, request: Mapping[str, Any], answer: str) -> None:
        """Store ``answer`` for ``key`` (committed before returning); a second put replaces it.

        A failed commit (the file locked by another process past ``timeout``, a full disk)
        is raised by every put whose answer it held."""
        row = (key, json.dumps(request, ensure_ascii=False, sort_keys=True), answer, time.time())
        with self._queue:
            batch = self._open_batch
            if batch is None:
                batch = self._open_batch = _Batch()
            batch.rows.append(row)
            while not batch.done:
                if self._writing:  # another thread is committing: this row goes in the next transaction
                    self._queue.wait()
                    continue
                # no transaction under way: this thread writes the open batch (its row among them)
                todo, self._open_batch, self._writing = self._open_batch, None, True
                self._queue.release()
                try:
                    self._write(todo.rows)
                except BaseException as e:
                    todo.error = e
                finally:
                    self._queue.acquire()
                    todo.done, self._writing = True, False
                    self._queue.notify_all()
        if batch.error is not None:
            raise batch.error

    def _write(self, rows: list[tuple[str, str, str, float]]) -> None:
        """``rows`` in one committed transaction (rolled back whole if it fails)."""
        with self._lock:
            db = self._connect()
            if len(rows) == 1:  # autocommit: one statement, one transaction
                db.execute(_INSERT, rows[0])
                return
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany(_INSERT, rows)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

    def __len__(self) -> int:
        with self._lock:
            if self._db is None and not self.path.exists():
                return 0
            return self._connect().execute("SELECT COUNT(*) FROM answers").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
        with self._read_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None

    def __enter__(self) -> ChatCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ChatCache({str(self.path)!r})"


_INSERT = "INSERT OR REPLACE INTO answers (key, request, answer, created) VALUES (?, ?, ?, ?)"


class _Batch:
    """Answers committed in one transaction, and how that went."""

    __slots__ = ("rows", "done", "error")

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, float]] = []
        self.done = False
        self.error: BaseException | None = None


def _is_busy(e: sqlite3.OperationalError) -> bool:
    """SQLite answered SQLITE_BUSY / SQLITE_LOCKED: another connection holds the file."""
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(e) or "busy" in str(e)
