"""The errors a user can act on (bad input, a refused request), and how a command reports them.

Every command line of the package (``vlr ...``, ``python -m
vlr_plugins.integrations.open_clip.train``) runs through :func:`run_cli`: a
:class:`UserError` becomes one ``error:`` line and exit status 2; any other exception
is a bug and keeps its traceback. ``VLR_DEBUG=1`` shows the traceback of a
:class:`UserError` too.

Subclasses keep a standard base where callers may already catch one
(``class DataFormatError(UserError, ValueError)``), so ``except ValueError`` still works.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["UserError", "UsageError", "ConfigError", "MissingFileError", "InputError", "as_user_error", "run_cli"]


class UserError(Exception):
    """Bad input or a refusal from outside; the message says what, where and what to do."""


class UsageError(UserError, ValueError):
    """A command-line option (``option``) is malformed or contradicts another.

    ``str(err)`` reads ``--budget: expected NAME=INTEGER, found 'short=x'``.
    """

    def __init__(self, option: str, problem: str) -> None:
        self.option = option
        self.problem = problem
        super().__init__(f"{option}: {problem}")


class ConfigError(UserError, ValueError):
    """A configuration value (a model option, a run-config key) is invalid, or contradicts
    the model or the data; the message names the key."""


class MissingFileError(UserError, FileNotFoundError):
    """A file or folder the user named does not exist (``str(err)`` names it)."""


class InputError(UserError):
    """A library check that raises a standard exception refused the user's input.

    Raised by :func:`as_user_error`, with the original exception as ``__cause__``.
    """


def _message(err: BaseException) -> str:
    # KeyError.__str__ repr()s its one argument; every other exception reads as written
    if isinstance(err, KeyError) and type(err).__str__ is KeyError.__str__ and len(err.args) == 1:
        return str(err.args[0])
    return str(err)


@contextmanager
def as_user_error(*kinds: type[Exception]) -> Iterator[None]:
    """Inside the block, an exception of one of ``kinds`` is a refusal of the user's input:
    it is raised again as an :class:`InputError` with the same message.

    For calls into code whose input checks raise standard exceptions (``FileExistsError``
    for an output that exists, ``KeyError`` for an unknown name); keep the block to the
    call that reads the input, so that the same exception from a bug elsewhere keeps its
    traceback. A :class:`UserError` passes through unchanged.

    Example::

        with as_user_error(FileExistsError):
            export_text_encoder(checkpoint, out)   # refuses an existing folder
    """
    try:
        yield
    except UserError:
        raise
    except kinds as e:
        raise InputError(_message(e)) from e


def run_cli(command: Callable[[], int]) -> int:
    """Run ``command`` and return its exit status, reporting errors as a command line does.

    - :class:`UserError`: ``error: <message>`` on stderr, status 2; with ``VLR_DEBUG``
      set, raised again (traceback);
    - ``KeyboardInterrupt``: ``interrupted``, status 130;
    - ``BrokenPipeError`` (``vlr list | head``: the reader left): not an error, status 0;
    - anything else propagates: it is a bug, and its traceback is the report.
    """
    try:
        return command()
    except UserError as e:
        if os.environ.get("VLR_DEBUG"):
            raise
        print(f"error: {_message(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
