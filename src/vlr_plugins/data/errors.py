"""Errors raised by the data readers, the embedding store and the image and video encoders.

Each says what was expected, what was found, and where, so that a bad record in a
500K-line corpus can be fixed without a debugger. All are :class:`~vlr_plugins.errors.UserError`
(``vlr`` reports them as one ``error:`` line) and keep their standard base (``ValueError``,
``KeyError``, ``FileExistsError``) for callers that catch those.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from vlr_plugins.errors import UserError

__all__ = ["DataFormatError", "ImageEncoderError", "MissingEmbeddingsError", "OutputExistsError", "VideoEncoderError"]

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
