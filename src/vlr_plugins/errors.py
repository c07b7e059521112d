"""The errors a user can act on (bad input, a refused request), and how a command reports them.

Every command line of the package (``vlr ...``, ``python -m
vlr_plugins.integrations.open_clip.train``) runs through :func:`run_cli`: a
:class:`UserError` becomes one ``error:`` line and exit status 2; any other exception
is a bug and keeps its traceback. ``VLR_DEBUG=1`` shows the traceback of a
:class:`UserError` too.

One convention for the exit status of every command (:func:`failed_items_status`):
0 the whole run; 1 the run finished but some of its items failed (undecodable videos,
failed requests), its output holds every other item and a rerun with ``--resume`` tries
the failed ones again; 2 refused (bad input: nothing written) or not one item could be
done.

Subclasses keep a standard base where callers may already catch one
(``class DataFormatError(UserError, ValueError)``), so ``except ValueError`` still works.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = ["UserError", "UsageError", "ConfigError", "MissingFileError", "InputError", "ModelLoadError",
           "MissingModelError",
           "DataFormatError", "MissingEmbeddingsError", "OutputExistsError", "ImageEncoderError",
           "VideoEncoderError", "image_encoder_error", "check_pretrained_location", "loading_pretrained",
           "refusing_pickled_weights", "as_user_error", "run_cli", "failed_items_status"]


class UserError(Exception):
    """Bad input or a refusal from outside; the message says what, where and what to do.

    Every subclass pickles with its attributes (``path``, ``record``, ``key``...), whatever
    its ``__init__`` takes, so that it crosses process boundaries (multiprocessing pools,
    Ray tasks) intact.
    """

    def __reduce__(self):
        return _rebuild_user_error, (type(self), self.args, self.__dict__)


def _rebuild_user_error(cls: type[UserError], args: tuple, state: dict) -> UserError:
    err = cls.__new__(cls, *args)
    err.args = args
    err.__dict__.update(state)
    return err


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


class ModelLoadError(UserError):
    """A pretrained model, tokenizer or processor could not be loaded (not downloaded, no
    network, no such Hub id or local folder); the message names it and the setting to change."""


class MissingModelError(ModelLoadError, MissingFileError):
    """The local folder (or file) a pretrained model was to be loaded from is not there; a
    path is never looked up as a Hub id."""


# --- data: files, embedding stores, outputs, encoders ---------------------------------
# Each says what was expected, what was found, and where, so that a bad record in a
# 500K-line corpus can be fixed without a debugger.

_MAX_LISTED = 20


def _type_name(value: Any) -> str:
    """JSON-flavoured name of ``value``'s type, for "found ..." in messages."""
    if value is None:
        return "null"
    return type(value).__name__


class DataFormatError(UserError, ValueError):
    """A file does not hold what its reader expects.

    Attributes:
        path: the file, as given to the reader.
        record: where in the file: a 1-based line number for text files (as editors
            count), a 0-based row index for Parquet (as ``pyarrow.Table.slice`` counts),
            or ``None`` when the problem is the whole file.
        field: the key of the record at fault, or ``None``.
        record_kind: ``"line"`` or ``"row"``; used only to render the message.
        problem: the message without the location prefix.

    ``str(err)`` reads ``train.jsonl, line 7, field 'positives': expected a list of
    strings, found int``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        problem: str,
        *,
        record: int | None = None,
        field: str | None = None,
        record_kind: str = "line",
    ) -> None:
        self.path = path
        self.record = record
        self.field = field
        self.record_kind = record_kind
        self.problem = problem
        where = [os.fspath(path)]
        if record is not None:
            where.append(f"{record_kind} {record}")
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{', '.join(where)}: {problem}")


class MissingEmbeddingsError(UserError, KeyError):
    """Some ids have no row in an embedding store; lists all of them at once.

    Attributes:
        missing: every missing id, in the order asked for.
        store: the store's directory (or ``None``).

    The message gives the count and the first 20 ids, so one run finds every gap
    instead of one per restart.
    """

    def __init__(self, missing: Iterable[str], store: str | os.PathLike[str] | None = None) -> None:
        self.missing = list(missing)
        self.store = store
        shown = ", ".join(repr(i) for i in self.missing[:_MAX_LISTED])
        more = len(self.missing) - _MAX_LISTED
        tail = f", ... and {more} more" if more > 0 else ""
        where = f" in embedding store {os.fspath(store)}" if store is not None else ""
        noun = "id has" if len(self.missing) == 1 else "ids have"
        self.message = f"{len(self.missing)} {noun} no embedding{where}: {shown}{tail}"
        super().__init__(self.message)

    def __str__(self) -> str:
        # KeyError.__str__ would repr() the message and wrap it in quotes
        return self.message


class OutputExistsError(UserError, FileExistsError):
    """An output (an embedding store, an export folder) is already there and is not replaced:
    the caller did not ask to overwrite it, or it is not one of ours (a plain file, a folder
    that holds something else), which is never replaced. The message names it."""


class ImageEncoderError(UserError, ValueError):
    """An image-encoder spec (``vlr precompute --encoder``, :func:`~vlr_plugins.data.load_encoder`)
    names no usable encoder: the spec is malformed, its module cannot be imported, the
    module lacks the attribute, the attribute is not callable, or the encoder returned
    something other than one finite row per image. The message names the spec.

    The import and attribute failures are also an ``ImportError`` / ``AttributeError``
    (:func:`image_encoder_error` picks the class), for callers that catch those.
    """


class VideoEncoderError(UserError, ValueError):
    """A video-encoder spec (``vlr precompute --videos ... --encoder``,
    :func:`~vlr_plugins.data.load_video_encoder`) names no usable video tower: the spec is
    malformed, its module or tower config cannot be read or built, what it names is not a
    :class:`~vlr_plugins.vision.VideoTower`, or the tower returned something other than one
    finite row per video. The message names the spec and the setting that gave it.
    """


class _EncoderImportError(ImageEncoderError, ImportError):
    pass


class _EncoderAttributeError(ImageEncoderError, AttributeError):
    pass


class _EncoderTypeError(ImageEncoderError, TypeError):
    pass


_ENCODER_ERRORS: dict[type[Exception], type[ImageEncoderError]] = {
    ImportError: _EncoderImportError, AttributeError: _EncoderAttributeError, TypeError: _EncoderTypeError,
}


def image_encoder_error(message: str, like: type[Exception] = ValueError) -> ImageEncoderError:
    """An :class:`ImageEncoderError` that is also a ``like`` (``ImportError``,
    ``AttributeError``, ``TypeError``; anything else: a ``ValueError``)."""
    return _ENCODER_ERRORS.get(like, ImageEncoderError)(message)


# --- turning failures into user errors, and reporting them ------------------------

#: where offline use is explained (named in every model-loading error)
OFFLINE_DOC = "docs/quickstart.md (offline use)"


_WEIGHT_FILES = (".bin", ".pt", ".pth", ".ckpt")
# torch.load(weights_only=True) refuses Python objects by name (a GLOBAL ...)
_REFUSED_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")
_REFUSED_OBJECT = re.compile(r"Unsupported global|GLOBAL |unrecognized function|Unsupported class")


def _looks_like_path(name: str) -> bool:
    """``name`` is a local path, never a Hub id (``org/name``): absolute, ``./`` / ``../`` / ``~``,
    or more parts than a Hub id has; a spec with a scheme (``ViT-B-32:/ckpt.pt``) is none."""
    if ":" in name and not os.path.isabs(name):
        return False
    return (os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1
            or (os.sep != "/" and os.sep in name))


def _unpickled_file(err: BaseException, name: str) -> str:
    """The file ``torch.load`` was reading when ``err`` was raised (its frame's ``f``), else the
    weight files of the folder ``name``, else ``name``."""
    tb = err.__traceback__
    found = None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "load" and frame.f_globals.get("__name__") == "torch.serialization":
            f = frame.f_locals.get("f")
            if isinstance(f, (str, os.PathLike)):
                found = os.fspath(f)
        tb = tb.tb_next
    if found is not None:
        return found
    if os.path.isdir(name):
        files = sorted(f for f in os.listdir(name) if f.endswith(_WEIGHT_FILES))
        if files:
            return ", ".join(os.path.join(name, f) for f in files)
    return name


def _pickled_weights(err: BaseException, name: str, setting: str) -> ModelLoadError:
    text = str(err)
    if not _REFUSED_OBJECT.search(text):  # an opcode weights_only does not know: no torch.save pickle at all
        gist = " ".join(text.split("WeightsUnpickler error:")[-1].split("Check the documentation")[0].split())
        return ModelLoadError(f"{setting}: cannot load {name!r}: {_unpickled_file(err, name)} is not a PyTorch "
                              f"weights file (torch.load: {gist[:200]})")
    found = _REFUSED_GLOBAL.search(text)
    what = f" (e.g. {found.group(1)})" if found else ""
    return ModelLoadError(
        f"{setting}: cannot load {name!r}: {_unpickled_file(err, name)} is not a weights-only checkpoint: it "
        f"holds pickled Python objects{what} that only a full unpickle could rebuild; unpickling a file can run "
        "any code, so vlr reads weights with torch.load(weights_only=True) only. Re-save the weights as "
        "safetensors (save_pretrained writes model.safetensors) or as plain tensors")


@contextmanager
def refusing_pickled_weights(name: str, setting: str) -> Iterator[None]:
    """Inside the block, ``torch.load(weights_only=True)`` refusing a weights file (a
    ``pytorch_model.bin``, ``.pt``, ``.bin`` that pickles Python objects, or bytes that are no
    ``torch.save`` pickle at all) is one :class:`ModelLoadError` naming the file (the one
    ``torch.load`` was reading), ``name`` (the model it belongs to) and ``setting``, instead of
    torch's page of advice (which suggests ``weights_only=False``: running the file).

    :func:`loading_pretrained` does this too; use this one alone around a ``torch.load`` of a
    model's weights where an ``OSError`` is no loading failure to reword (the open_clip
    ``local-dir:`` check).
    """
    import pickle

    try:
        yield
    except pickle.UnpicklingError as e:
        raise _pickled_weights(e, name, setting) from None


def check_pretrained_location(name: str, setting: str, needs: str | None = None) -> None:
    """Raise unless ``name`` can name a pretrained model: a path (absolute, ``./``, ``../``,
    ``~``, more parts than a Hub id's ``org/name``) that is not there is a
    :class:`MissingModelError` (not a Hub id to look up); a folder without the file ``needs``
    (``config.json`` for a transformers model) a :class:`ModelLoadError` naming both."""
    if _looks_like_path(name) and not os.path.exists(os.path.expanduser(name)):
        kind = "file" if name.endswith((*_WEIGHT_FILES, ".safetensors")) else "folder"
        raise MissingModelError(f"{setting}: cannot load {name!r}: no such {kind} (a local path, so it is not "
                                f"looked up on the Hugging Face Hub); give the folder that holds the model's files; "
                                f"see {OFFLINE_DOC}")
    if needs is not None and os.path.isdir(name) and not os.path.isfile(os.path.join(name, needs)):
        raise ModelLoadError(f"{setting}: the folder {name} has no {needs}; expected a transformers model folder "
                             f"({needs} beside the weights, as save_pretrained writes it) or a Hub id")


#: the setting of each model being loaded, by name (``loading_pretrained`` blocks nest)
_LOADING: ContextVar[dict[str, str]] = ContextVar("vlr_loading_pretrained", default={})


@contextmanager
def loading_pretrained(name: str, setting: str, *, needs: str | None = None) -> Iterator[None]:
    """Inside the block, a failure to load the pretrained model ``name`` (a Hub id or a
    folder) is reported as one :class:`ModelLoadError` that names it, the setting that chose
    it (``setting``: a recipe key such as ``model.pretrained``, or an option such as
    ``--encoder``), the alternatives (a local folder; ``HF_HUB_OFFLINE=1`` with the files
    in the cache; a random-init model from a config) and the doc on offline use.

    transformers and huggingface_hub raise ``OSError`` subclasses for all of these (no
    connection, offline mode without a cached copy, an unknown repository, a folder without
    the files), so that is what is caught; anything else is not a loading failure, but for
    weights that ``torch.load(weights_only=True)`` refuses (:func:`refusing_pickled_weights`).

    Before the block runs, ``name`` is checked (:func:`check_pretrained_location`): a path
    that is not there is a missing folder, not a Hub id; with ``needs`` (``"config.json"``), a
    folder must hold that file (transformers' own message asks for a ``model_type`` key).

    Example::

        with loading_pretrained(cfg["pretrained"], "model.pretrained", needs="config.json"):
            model = BlipForImageTextRetrieval.from_pretrained(cfg["pretrained"])
    """
    outer = _LOADING.get()
    setting = outer.get(name, setting)  # a block inside another for the same model: the outer setting is the user's
    check_pretrained_location(name, setting, needs)
    token = _LOADING.set({**outer, name: setting})
    try:
        with refusing_pickled_weights(name, setting):
            yield
    except UserError:
        raise
    except OSError as e:
        offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
        reason = " ".join(str(e).split())
        if len(reason) > 300:
            reason = reason[:300] + "..."
        raise ModelLoadError(
            f"{setting}: cannot load {name!r}: {reason} -- give a local folder that holds the model's "
            f"files, or run where the Hugging Face Hub is reachable"
            + ("" if offline else " (or set HF_HUB_OFFLINE=1 once the files are in the cache)")
            + f"; see {OFFLINE_DOC}"
        ) from e
    finally:
        _LOADING.reset(token)


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


# torch.utils.data re-raises a worker's exception in the main process as
# ``exc_type(msg)`` with msg = "Caught NAME in DataLoader worker process N.\nOriginal
# Traceback ...", or as a RuntimeError when exc_type cannot be built from one string.
_WORKER_ERROR = re.compile(r"\ACaught (?P<name>\w+) (?P<where>in DataLoader worker process \d+)\.\n"
                           r"Original Traceback")


def _user_error_names(cls: type = UserError) -> set[str]:
    names = {cls.__name__}
    for sub in cls.__subclasses__():
        names |= _user_error_names(sub)
    return names


def _from_worker(err: BaseException) -> str | None:
    """The message of a :class:`UserError` raised in a DataLoader worker, with the worker
    named, or ``None`` when ``err`` is not one."""
    text = str(err)
    match = _WORKER_ERROR.match(text)
    if not match or match["name"] not in _user_error_names():
        return None
    # the traceback ends with "module.Name: message" (the raised exception comes last)
    lines = list(re.finditer(rf"^(?:[\w.]+\.)?{match['name']}: ", text, re.MULTILINE))
    if not lines:
        return None
    return f"{text[lines[-1].end():].strip()} ({match['where']})"


def failed_items_status(failed: int, total: int) -> int:
    """The exit status of a run over ``total`` items of which ``failed`` failed (the module's
    convention): 0 none failed, 1 some (the output holds the others), 2 every one of them."""
    if failed <= 0:
        return 0
    return 2 if failed >= total else 1


def run_cli(command: Callable[[], int]) -> int:
    """Run ``command`` and return its exit status, reporting errors as a command line does.

    - :class:`UserError`: ``error: <message>`` on stderr, status 2; with ``VLR_DEBUG``
      set, raised again (traceback); one raised in a DataLoader worker (which torch
      re-raises with the worker's traceback in the message, or as a ``RuntimeError``) is
      reported the same way, by its own message and the worker's number;
    - ``KeyboardInterrupt``: ``interrupted``, status 130;
    - ``BrokenPipeError`` (``vlr list | head``: the reader left): not an error, status 0;
    - anything else propagates: it is a bug, and its traceback is the report.
    """
    try:
        return command()
    except UserError as e:
        if os.environ.get("VLR_DEBUG"):
            raise
        print(f"error: {_from_worker(e) or _message(e)}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        message = _from_worker(e)
        if message is None or os.environ.get("VLR_DEBUG"):
            raise
        print(f"error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
