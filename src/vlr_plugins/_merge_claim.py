"""The merge claim of a sharded run (``vlr mine``, ``vlr precompute``): ``merging.json`` in the
work folder, naming the process that merges (host, pid, start time), so that a later run can
tell a merge in progress from one that was killed (docs/eval.md, "Sharded and resumable";
docs/precompute.md). Framework-free: any application may import it.

The claim is written whole under a temporary name and hard-linked onto ``merging.json``: the
link fails when the name exists, so exactly one process holds it, and a reader never sees a
half-written claim (where the file system has no hard links, ``O_EXCL`` creation stands in,
and a claim that cannot be read is judged by its file's age alone). A claim is **stale** when
its holder is provably gone: it was made on this host by a pid that no longer exists (or by
this very pid: a container that reuses pids), or it is older than ``--claim-timeout``
seconds. A stale claim is taken over by renaming it away (one renamer wins) and claiming anew.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEFAULT_CLAIM_TIMEOUT", "Claim", "read_claim", "take_claim"]

#: seconds after which a claim is taken over even when its holder cannot be shown gone
#: (another host, or a pid that exists again); a merge reads the parts and writes one file
DEFAULT_CLAIM_TIMEOUT = 3600.0


@dataclass(frozen=True)
class Claim:
    """Who holds the merge: ``host``/``pid`` are ``None`` for a claim that cannot be read."""

    path: Path
    host: str | None
    pid: int | None
    started: float  # the holder's clock (or the file's mtime when unreadable)
    raw: bytes

    def alive(self) -> bool | None:
        """True / False when it can be told (this host), None when not (another host, unreadable)."""
        if self.pid is None or self.host != socket.gethostname():
            return None
        if self.pid == os.getpid():
            return False  # this process has not claimed: an earlier holder's pid, reused
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except (PermissionError, OSError):
            return True  # it exists (another user's process)
        return True

    def age(self) -> float:
        return max(0.0, time.time() - self.started)

    def stale(self, timeout: float) -> bool:
        return self.alive() is False or self.age() > timeout

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        who = f"host {self.host} pid {self.pid}" if self.pid is not None else "an unreadable claim"
        state = {True: "running", False: "gone", None: "on another host" if self.pid is not None else "unknown"}
        return f"{who}, since {when} ({self.age():.0f} s ago, {state[self.alive()]})"


def read_claim(path: Path) -> Claim | None:
    """The claim at ``path``, or None when there is none."""
    try:
        raw = path.read_bytes()
        mtime = path.stat().st_mtime
    except FileNotFoundError:
        return None
    try:
        record = json.loads(raw)
        host, pid, started = str(record["host"]), int(record["pid"]), float(record["started"])
    except (ValueError, KeyError, TypeError):
        return Claim(path, None, None, mtime, raw)
    return Claim(path, host, pid, started, raw)


def _link_new(path: Path, record: dict) -> bool:
    """Create ``path`` holding ``record`` whole, only if it does not exist."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    data = (json.dumps(record) + "\n").encode()
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:  # no hard links here: exclusive creation (a kill mid-write leaves an unreadable claim)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _remove_if_same(claim: Claim) -> bool:
    """Move ``claim`` out of the way if the file is still the one judged (one mover wins)."""
    aside = claim.path.with_name(f".{claim.path.name}.{uuid.uuid4().hex[:8]}.stale")
    try:
        os.rename(claim.path, aside)
    except FileNotFoundError:
        return True  # gone already (its holder finished, or another run moved it)
    try:
        if aside.read_bytes() != claim.raw:  # a new claim made since: put it back
            with contextlib.suppress(OSError):
                os.link(aside, claim.path)
            return False
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            aside.unlink()


def take_claim(path: Path, *, timeout: float, force: bool = False) -> tuple[bool, Claim | None]:
    """Try to hold the merge claim ``path``: ``(True, the stale claim taken over or None)``
    or ``(False, the claim someone else holds)``. ``force`` (``--merge-only``) also takes a
    claim that is not stale, unless its holder is provably running on this host."""
    record = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}
    for _ in range(3):
        if _link_new(path, record):
            return True, None
        held = read_claim(path)
        if held is None:
            continue  # released meanwhile: try again
        if not (held.stale(timeout) or (force and held.alive() is not True)):
            return False, held
        if _remove_if_same(held) and _link_new(path, record):
            return True, held
    return False, read_claim(path)
