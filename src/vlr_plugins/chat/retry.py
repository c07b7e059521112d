"""When to ask an endpoint again, and how long to wait first: exponential backoff with
jitter, and never less than the server's ``Retry-After``."""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

__all__ = ["RetryPolicy", "retry_after_seconds", "retryable_status"]


def retryable_status(status: int) -> bool:
    """Whether an HTTP status is worth a retry: 408 (timeout), 409 (conflict), 429 (rate
    limit) and every 5xx. Other 4xx say the request itself is wrong; asking again won't help."""
    return status in (408, 409, 429) or status >= 500


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The wait a response asks for, in seconds, or ``None`` when it names none.

    Reads ``retry-after-ms`` (milliseconds, sent by some OpenAI-compatible servers) before
    ``Retry-After``, which is either seconds or an HTTP date (RFC 9110, sec. 10.2.3).
    Header names are matched case-insensitively; a value that parses to a negative wait
    counts as 0.
    """
    lower = {k.lower(): v for k, v in headers.items()}
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = lower.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            pass
        if name == "retry-after":
            try:
                when = parsedate_to_datetime(value)
            except (TypeError, ValueError):
                return None
            return max(0.0, when.timestamp() - time.time())
    return None


@dataclass(frozen=True)
class RetryPolicy:
    """How often, and after how long, a failed call is made again.

    The wait before retry ``attempt`` (0-based) is ``min(max_delay, base_delay * 2**attempt)``
    scaled by a random factor in [0.5, 1] ("equal jitter": clients that failed together
    do not come back together); when the server sent ``Retry-After``, the wait is at least
    that (capped at ``max_retry_after``).

    Example::

        >>> RetryPolicy(base_delay=1.0).delay(3, retry_after=None, rng=random.Random(0)) <= 8.0
        True
    """

    max_retries: int = 6
    base_delay: float = 1.0
    max_delay: float = 60.0
    max_retry_after: float = 600.0

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, found {self.max_retries}")
        if self.base_delay < 0 or self.max_delay < 0 or self.max_retry_after < 0:
            raise ValueError("delays must be >= 0, found "
                             f"base_delay={self.base_delay}, max_delay={self.max_delay}, "
                             f"max_retry_after={self.max_retry_after}")

    def delay(self, attempt: int, retry_after: float | None = None,
              rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (0 for the first retry)."""
        backoff = min(self.max_delay, self.base_delay * 2.0 ** attempt)
        backoff *= (rng or random).uniform(0.5, 1.0)
        if retry_after is None:
            return backoff
        return max(backoff, min(retry_after, self.max_retry_after))
