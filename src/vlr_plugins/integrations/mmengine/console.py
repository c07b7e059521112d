"""What a run shows on the console: progress, results and real warnings; the rest goes to
the run's log file.

MMEngine's Runner logs, on the console and in ``<work_dir>/<timestamp>/<timestamp>.log``
alike, its environment (~30 lines), the whole config (~200), the hook order (~60) and
notices such as "Dataset ... has no metainfo" before the first step, so a user's own
problem would sit below a few hundred lines. :func:`build_runner` keeps the log file
complete and trims the console to :class:`ConsoleFilter`'s choice;
:func:`third_party_warnings` hides the Python warnings of :data:`THIRD_PARTY_WARNINGS`
while a run is built and trained. Both drop only the messages listed here, each matched by
its text and by who emits it (the logger, or the warning's category and module), so that
any other warning, ours or a library's, still shows. ``verbose`` shows everything, as
MMEngine does.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = ["NOISE", "THIRD_PARTY_WARNINGS", "ConsoleFilter", "Notice", "build_runner", "third_party_warnings"]


@dataclass(frozen=True)
class Notice:
    """A message a library emits on every run that says nothing about the run.

    ``message``: a regular expression matched at the start of the text. ``emitter``: the
    logger's name (for :data:`NOISE`), or a regular expression the module a warning is
    attributed to must match in full (for :data:`THIRD_PARTY_WARNINGS`). ``category``: the
    warning class (``None`` for log records). ``source``: where it comes from and why.
    """

    message: str
    emitter: str
    source: str
    category: type[Warning] | None = None


#: MMEngine's log records that stay in the log file: its own deprecations and notices,
#: logged through ``print_log(..., logger="current")`` to the "mmengine" logger
NOISE: tuple[Notice, ...] = (
    Notice(r"Dataset \w+ has no metainfo\.", "mmengine",
           "mmengine.runner.loops (EpochBasedTrainLoop, ValLoop, TestLoop .__init__): a dataset "
           "without ``metainfo``; ours have no class names or palette for a visualizer to show"),
    Notice(r'"FileClient" will be deprecated in future\.', "mmengine",
           "mmengine.fileio.file_client.FileClient.__new__, called by CheckpointHook.before_train "
           "and LoggerHook.before_run even when no file_client_args is given"),
    Notice(r'"HardDiskBackend" is the alias of "LocalBackend" and the former will be deprecated', "mmengine",
           "mmengine.fileio.file_client.HardDiskBackend.__init__: the backend those FileClients pick "
           "for a local work_dir"),
)
#: Python warnings that are not shown while a run is built and trained
THIRD_PARTY_WARNINGS: tuple[Notice, ...] = (
    Notice(r"`torch\.cuda\.amp\.GradScaler\(args\.\.\.\)` is deprecated",
           r"mmengine\.optim\.optimizer\.amp_optimizer_wrapper",
           "AmpOptimWrapper.__init__ (``train.amp`` on a GPU) builds torch.cuda.amp.GradScaler, "
           "which torch deprecates in favour of torch.amp.GradScaler('cuda')",
           FutureWarning),
)
#: INFO lines worth a console: the logger hook's progress and metrics, checkpoints
PROGRESS: tuple[str, ...] = (
    "Epoch(", "Iter(", "Saving checkpoint", "Load checkpoint", "resumed epoch", "Auto resumed",
)
_NOISE = tuple((n.emitter, re.compile(n.message)) for n in NOISE)


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
            return not any(record.name == logger and pattern.match(message) for logger, pattern in _NOISE)
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
    """Inside the block, the warnings of :data:`THIRD_PARTY_WARNINGS` (each by message,
    category and module) are not shown, and every other warning follows the filters in
    force. With ``verbose`` every ``DeprecationWarning``, ``PendingDeprecationWarning`` and
    ``FutureWarning`` is shown, once per place (Python's own filters would hide most
    deprecations). The filters are restored on exit."""
    with warnings.catch_warnings():
        if verbose:
            for category in (DeprecationWarning, PendingDeprecationWarning, FutureWarning):
                warnings.filterwarnings("default", category=category)
        else:
            for notice in THIRD_PARTY_WARNINGS:
                warnings.filterwarnings("ignore", message=notice.message, category=notice.category,
                                        module=notice.emitter + "$")
        yield
