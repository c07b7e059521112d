"""RunSummary: counters added from many threads, as a dict and as one line."""

from __future__ import annotations

import threading

from vlr_plugins.chat import RunSummary


def test_counts_from_many_threads_add_up():
    summary = RunSummary()

    def work():
        for _ in range(1000):
            summary.add(calls=1, retries=2)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    d = summary.as_dict()
    assert (d["calls"], d["retries"], d["failures"]) == (8000, 16000, 0)
    assert list(d) == ["requests", "calls", "cache_hits", "retries", "malformed", "reasks", "failures",
                       "prompt_tokens", "completion_tokens"]


def test_one_line():
    summary = RunSummary(requests=4, calls=6, cache_hits=1, retries=1, malformed=1, reasks=1, failures=0,
                         prompt_tokens=100, completion_tokens=20)
    assert str(summary) == ("4 requests: 6 calls, 1 cache hits, 1 retries, 1 malformed answers (1 asked again), "
                            "0 failures; 100 prompt + 20 completion tokens")
