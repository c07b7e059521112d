"""What a run shows on the console: progress, results and real warnings; the rest goes to
the run's log file.

MMEngine's Runner logs, on the console and in ``<work_dir>/<timestamp>/<timestamp>.log``
alike, its environment (~30 lines), the whole config (~200), the hook order (~60) and
notices such as "Dataset ... has no metainfo" before the first step, so a user's own
problem would sit below a few hundred lines. :func:`build_runner` keeps the log file
complete and trims the console to :class:`ConsoleFilter`'s choice;
:func:`third_party_warnings` scopes Python's deprecation warnings of the libraries a
run uses. ``verbose`` shows everything, as MMEngine does.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["ConsoleFilter", "build_runner", "third_party_warnings"]

#: console notices that are no problem of the run's (kept in the log file)
NOISE: tuple[str, ...] = (
    "has no metainfo",                     # a dataset without MMEngine's metainfo
    '"FileClient" will be deprecated',     # MMEngine's own deprecations, used by its hooks
    '"HardDiskBackend" is the alias',
)
#: INFO lines worth a console: the logger hook's progress and metrics, checkpoints
PROGRESS: tuple[str, ...] = (
    "Epoch(", "Iter(", "Saving checkpoint", "Load checkpoint", "resumed epoch", "Auto resumed",
)


class ConsoleFilter(logging.Filter):
    """Lets through warnings and errors other than :data:`NOISE`, and, with ``progress``,
    the INFO lines of :data:`PROGRESS` (``Epoch(train) [1][10/40] lr: ... loss: ...``,
    ``Epoch(val) ... r_mean: ...``); drops the rest of MMEngine's INFO (environment,
    config, hook order)."""

    def __init__(self, progress: bool = True) -> None:
        super().__init__()
        self.progress = progress

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.levelno >= logging.WARNING:
            return not any(n in message for n in NOISE)
        return self.progress and message.startswith(PROGRESS)


def build_runner(cfg: Any, *, verbose: bool = False, progress: bool = True) -> Any:
    """``Runner.from_cfg(cfg)`` whose console handler shows only what
    :class:`ConsoleFilter` lets through (``verbose``: everything); the run's log file
    keeps every line at the config's ``log_level``. ``progress=False`` also drops the
    per-interval progress lines (for callers with their own progress display)."""
    from mmengine.runner import Runner

    if verbose:
        return Runner.from_cfg(cfg)
    console = ConsoleFilter(progress)

    class QuietRunner(Runner):
        def build_logger(self, *args: Any, **kwargs: Any) -> Any:
            logger = super().build_logger(*args, **kwargs)
            for handler in logger.handlers:
                # the console handler; FileHandler is a StreamHandler too, and keeps everything
                if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
                    handler.addFilter(console)
            return logger

    return QuietRunner.from_cfg(cfg)


@contextmanager
def third_party_warnings(verbose: bool = False) -> Iterator[None]:
    """Inside the block, ``DeprecationWarning`` / ``PendingDeprecationWarning`` /
    ``FutureWarning`` raised outside ``vlr_plugins`` are not shown; with ``verbose`` all of
    them are, once per place (Python's own filters would hide most deprecations); other
    warnings are untouched. The filters are restored on exit."""
    with warnings.catch_warnings():
        for category in (DeprecationWarning, PendingDeprecationWarning, FutureWarning):
            warnings.filterwarnings("default" if verbose else "ignore", category=category)
            warnings.filterwarnings("default", category=category, module=r"vlr_plugins(\.|$)")
        yield
