"""RetryPolicy, retryable_status, retry_after_seconds: backoff bounds, jitter, Retry-After."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest

from vlr_plugins.chat import RetryPolicy, retry_after_seconds, retryable_status


def test_backoff_doubles_with_jitter_and_is_capped():
    policy = RetryPolicy(base_delay=0.5, max_delay=3.0)
    rng = random.Random(0)
    for attempt in range(8):
        full = min(3.0, 0.5 * 2 ** attempt)
        delays = [policy.delay(attempt, rng=rng) for _ in range(200)]
        assert all(full / 2 <= d <= full for d in delays)
        assert max(delays) - min(delays) > full / 4  # jittered, not constant


def test_retry_after_is_a_floor_capped_by_max_retry_after():
    policy = RetryPolicy(base_delay=0.01, max_delay=0.02, max_retry_after=5.0)
    assert policy.delay(0, retry_after=2.0) == 2.0
    assert policy.delay(0, retry_after=100.0) == 5.0
    long_backoff = RetryPolicy(base_delay=10.0, max_delay=10.0)
    assert long_backoff.delay(0, retry_after=1.0, rng=random.Random(1)) >= 5.0  # backoff wins


def test_negative_settings_are_refused():
    with pytest.raises(ValueError, match="max_retries must be >= 0, found -1"):
        RetryPolicy(max_retries=-1)


@pytest.mark.parametrize("status, expected", [(408, True), (409, True), (429, True), (500, True), (502, True),
                                              (503, True), (400, False), (401, False), (404, False),
                                              (422, False)])
def test_retryable_statuses(status, expected):
    assert retryable_status(status) is expected


def test_retry_after_header_forms():
    assert retry_after_seconds({"Retry-After": "3"}) == 3.0
    assert retry_after_seconds({"retry-after": "1.5"}) == 1.5
    assert retry_after_seconds({"Retry-After-Ms": "250", "Retry-After": "9"}) == 0.25
    assert retry_after_seconds({}) is None
    assert retry_after_seconds({"Retry-After": "soon"}) is None
    when = datetime.now(timezone.utc) + timedelta(seconds=30)
    seconds = retry_after_seconds({"Retry-After": format_datetime(when, usegmt=True)})
    assert 25 <= seconds <= 31
    past = datetime.now(timezone.utc) - timedelta(seconds=30)
    assert retry_after_seconds({"Retry-After": format_datetime(past, usegmt=True)}) == 0.0
