"""What a run shows on the console: progress, results and real warnings; the rest goes to
the run's log file.

MMEngine's Runner logs, on the console and in ``<work_dir>/<timestamp>/<timestamp>.log``
alike, its environment (~30 lines), the whole config (~200), the hook order (~60) and
notices such as "Dataset ... has no metainfo" before the first step, so a user's own
problem would sit below a few hundred lines. :func:`build_runner` (every runner a ``vlr``
command builds: ``Runner``, and the ``FlexibleRunner`` of CaRe's DeepSpeed recipe, whose
strategy builds the logger) keeps the log file complete and trims the console to
:class:`ConsoleFilter`'s choice;
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
    Notice(r"`is_gradient_checkpointing` is deprecated and will be removed in v6\.",
           r"transformers\.modeling_utils",
           "PreTrainedModel.is_gradient_checkpointing, transformers 5's deprecated alias, read by "
           "peft.PeftModel.__init__ (``getattr(model, 'is_gradient_checkpointing', True)``) as every LoRA "
           "run (E5-V, ``model.finetune: lora``) wraps its model",
           FutureWarning),
    Notice(r"`broadcast_buffers` is deprecated\. Use `forward_sync_buffers` instead\.",
           r"mmengine\.model\.wrappers\.distributed",
           "MMDistributedDataParallel.__init__ passes MMEngine's default broadcast_buffers=False (every "
           "distributed Runner, and cpu_distributed's wrapper on CPU processes) to torch's "
           "DistributedDataParallel, which deprecates it from torch 2.14",
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
    """The runner of ``cfg`` (a ``Config`` or dict), built as ``Runner.from_cfg`` builds it:
    ``cfg.runner_type`` picks the class (MMEngine's ``Runner`` by default, ``FlexibleRunner``
    for DeepSpeed / FSDP strategies, any runner registered under MMEngine's ``RUNNERS``);
    a ``DDPStrategy`` / ``FSDPStrategy`` also runs on CPU processes and resumes under FSDP
    (:mod:`~vlr_plugins.integrations.mmengine.strategies`).

    Its console handler shows only what :class:`ConsoleFilter` lets through (``verbose``:
    everything); the run's log file keeps every line at the config's ``log_level``.
    ``progress=False`` also drops the per-interval progress lines (for callers with their
    own progress display). The run gets a timestamp of its own
    (:func:`~vlr_plugins.integrations.mmengine.run_timestamp.claim_timestamp`), and formats
    its config once (:class:`~vlr_plugins.integrations.mmengine.config_text.FormattedOnceConfig`).
    """
    from vlr_plugins.integrations.mmengine.strategies import import_runners

    import_runners()  # without deepspeed, unless a DeepSpeed strategy is built
    from mmengine.runner import FlexibleRunner, Runner

    from vlr_plugins.integrations.mmengine.config_text import FormattedOnceConfig
    from vlr_plugins.integrations.mmengine.registry import RUNNERS

    cfg = FormattedOnceConfig.of(cfg)
    runner_type = cfg.get("runner_type") or "Runner"
    base = RUNNERS.get(runner_type) if isinstance(runner_type, str) else runner_type
    if not (isinstance(base, type) and issubclass(base, (Runner, FlexibleRunner))):
        from vlr_plugins.errors import ConfigError

        raise ConfigError(f"runner_type: expected Runner, FlexibleRunner or a registered subclass of either, "
                          f"found {runner_type!r}")
    console = None if verbose else ConsoleFilter(progress)
    if issubclass(base, FlexibleRunner):  # its strategy sets up the run and builds the logger
        return _flexible_runner(base, console).from_cfg(cfg)
    return _ours(base, console, "setup_env").from_cfg(cfg)


def _quiet(logger: Any, console: ConsoleFilter | None) -> Any:
    for handler in logger.handlers if console is not None else ():
        # the console handler; FileHandler is a StreamHandler too, and keeps everything
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            handler.addFilter(console)
    return logger


def _ours(base: type, console: ConsoleFilter | None, setup_env: str) -> type:
    """``base`` (a runner, or a FlexibleRunner's strategy: whichever sets up the run and
    builds its logger) with its console filtered and a timestamp of its own, taken right
    after ``setup_env`` sets MMEngine's and before the log folder and logger are made."""
    from vlr_plugins.integrations.mmengine.run_timestamp import claim_timestamp

    def build_logger(self: Any, *args: Any, **kwargs: Any) -> Any:
        return _quiet(super(cls, self).build_logger(*args, **kwargs), console)

    def setup(self: Any, *args: Any, **kwargs: Any) -> None:
        getattr(super(cls, self), setup_env)(*args, **kwargs)
        self._timestamp = claim_timestamp(self._work_dir, self._timestamp)

    methods = {"build_logger": build_logger, setup_env: setup, "__module__": __name__}
    if setup_env == "setup_env":  # a Runner: torchrun on CPU processes too (cpu_distributed)
        from vlr_plugins.integrations.mmengine.cpu_distributed import cpu_model_wrapper_cfg, init_cpu_process_group

        def runner_setup(self: Any, env_cfg: dict) -> None:
            if self.distributed:
                init_cpu_process_group(self.launcher, env_cfg)
            setup(self, env_cfg)

        def wrap_model(self: Any, model_wrapper_cfg: dict | None, model: Any) -> Any:
            wrapper = cpu_model_wrapper_cfg(model_wrapper_cfg, self.distributed,
                                            self.cfg.get("find_unused_parameters", False))
            return super(cls, self).wrap_model(wrapper, model)

        methods.update(setup_env=runner_setup, wrap_model=wrap_model)
    # the same name: FlexibleRunner.build_strategy recognizes DeepSpeedStrategy by its class name
    cls = type(base.__name__, (base,), methods)
    return cls


def _flexible_runner(base: type, console: ConsoleFilter | None) -> type:
    from mmengine.registry import STRATEGIES

    from vlr_plugins.integrations.mmengine.strategies import with_fixes

    def build_strategy(self: Any, strategy: Any = None, launcher: str = "none", **kwargs: Any) -> Any:
        if strategy is None:  # FlexibleRunner's own default
            strategy = dict(type="SingleDeviceStrategy" if launcher == "none" else "DDPStrategy")
        if isinstance(strategy, dict):
            kind = STRATEGIES.get(strategy["type"]) if isinstance(strategy["type"], str) else strategy["type"]
            if kind is not None:  # else MMEngine names the unknown type
                strategy = dict(strategy, type=_ours(with_fixes(kind), console, "_setup_env"))
        return super(cls, self).build_strategy(strategy, launcher, **kwargs)

    cls = type(base.__name__, (base,), {"build_strategy": build_strategy, "__module__": __name__})
    return cls


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
