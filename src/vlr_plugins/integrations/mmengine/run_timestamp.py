"""Each run's own timestamp: its log folder ``<work_dir>/<timestamp>/``, log file and experiment
name.

MMEngine names a run by the second it starts (``20261130_202348``): the log folder and file,
the config copy and the experiment name (``<name>_<timestamp>``) under which a process keeps
one logger, one message hub and one visualizer. Two runs started in the same second into
the same work dir would write into one folder and one log file; two in one process (tests,
``vlr demo``) would share a logger, message hub and visualizer even across work dirs.
:func:`claim_timestamp` gives such a run ``<timestamp>_1`` (``_2``...) instead.
"""

from __future__ import annotations

import itertools
import os

__all__ = ["claim_timestamp"]


def claim_timestamp(work_dir: str | os.PathLike, timestamp: str) -> str:
    """``timestamp``, or ``timestamp_<n>`` with the smallest ``n >= 1`` free: no run of this
    process is named after it and ``<work_dir>/<it>`` did not exist; that folder is created
    here (atomically, so two processes never get the same one). In a distributed run rank 0
    chooses and every rank gets its choice."""
    from mmengine.dist import broadcast_object_list, get_rank

    chosen = [_claim(str(work_dir), timestamp) if get_rank() == 0 else None]
    broadcast_object_list(chosen)
    return chosen[0]


def _named_in_process(timestamp: str) -> bool:
    """A run of this process (ours or any other MMEngine runner's) is named after ``timestamp``:
    its logger, message hub and visualizer are ``<experiment name>_<timestamp>``, or
    ``<timestamp>`` alone."""
    from mmengine.logging import MessageHub, MMLogger
    from mmengine.visualization import Visualizer

    return any(name == timestamp or name.endswith(f"_{timestamp}")
               for kind in (MMLogger, MessageHub, Visualizer) for name in kind._instance_dict)


def _claim(work_dir: str, timestamp: str) -> str:
    os.makedirs(work_dir, exist_ok=True)
    for n in itertools.count():
        candidate = f"{timestamp}_{n}" if n else timestamp
        if _named_in_process(candidate):
            continue
        try:
            os.mkdir(os.path.join(work_dir, candidate))
        except FileExistsError:
            continue
        return candidate
    raise AssertionError("unreachable")
