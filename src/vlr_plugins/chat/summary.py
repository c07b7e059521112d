"""What a run of chat requests cost: calls made, cache hits, retries and failures."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, fields

__all__ = ["RunSummary"]


@dataclass
class RunSummary:
    """Counters of one client's requests; safe to update from many threads.

    - ``requests``: requests asked for (a re-asked malformed answer is still one request);
    - ``calls``: HTTP calls made to the endpoint (retries included, cache hits not);
    - ``cache_hits``: answers read from the cache instead of a call;
    - ``retries``: calls made again after a 429, a 5xx, a timeout or a dropped connection;
    - ``malformed``: answers that could not be read (e.g. not the JSON asked for);
    - ``reasks``: malformed answers asked again, with the problem named;
    - ``failures``: requests left without a usable answer (retries or re-asks exhausted);
      a caller must report these, never score them;
    - ``prompt_tokens`` / ``completion_tokens``: as the endpoint reported them, for calls
      made in this run (cache hits cost nothing).
    """

    requests: int = 0
    calls: int = 0
    cache_hits: int = 0
    retries: int = 0
    malformed: int = 0
    reasks: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: int) -> None:
        """Add to counters by name, atomically: ``summary.add(calls=1, retries=1)``."""
        with self._lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}

    def __str__(self) -> str:
        d = self.as_dict()
        return (f"{d['requests']} requests: {d['calls']} calls, {d['cache_hits']} cache hits, "
                f"{d['retries']} retries, {d['malformed']} malformed answers "
                f"({d['reasks']} asked again), {d['failures']} failures; "
                f"{d['prompt_tokens']} prompt + {d['completion_tokens']} completion tokens")
