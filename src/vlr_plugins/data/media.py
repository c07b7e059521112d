"""Where a training sample's visual side comes from: stored embeddings, or files on disk.

A media source is what :class:`~vlr_plugins.data.TextViewsDataset` asks for the image
(or video) of a sample. It checks every sample once, up front (all problems of a kind
in one error), and loads one sample at a time inside a data-loader worker. Sources
pickle without open file handles, so each worker opens its own.

* :class:`StoredEmbeddings` -- precomputed ``(D,)`` embeddings from an
  :class:`~vlr_plugins.data.EmbeddingStore` (``vlr precompute``), by sample id: the
  frozen-tower recipes, where no pixel is decoded during training.
* :class:`ImageFiles` -- the image at ``sample.media``, opened with PIL and passed
  through a transform (open_clip's preprocessing).

A video source (frames decoded and sampled per step) is one more class with the same
two methods.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from vlr_plugins.data.embedding_store import EmbeddingStore
from vlr_plugins.errors import DataFormatError

__all__ = ["MediaSource", "StoredEmbeddings", "ImageFiles"]


class MediaSource(Protocol):
    """``check(samples)`` once, then ``load(sample)`` per step (in a worker)."""

    def check(self, samples: Sequence[Any]) -> None: ...

    def load(self, sample: Any) -> Any: ...


class StoredEmbeddings:
    """Each sample's precomputed embedding, ``(D,)`` float32, read from a store by its id.

    ``path``: an embedding-store folder. The store is opened on first use, and a pickled
    copy (a data-loader worker) opens its own, never sharing file handles.
    ``check(samples)`` reports every id without a row at once
    (:class:`~vlr_plugins.errors.MissingEmbeddingsError`).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._store: EmbeddingStore | None = None

    @property
    def store(self) -> EmbeddingStore:
        if self._store is None:
            self._store = EmbeddingStore(self.path)
        return self._store

    def check(self, samples: Sequence[Any]) -> None:
        self.store.check([s.id for s in samples])

    def load(self, sample: Any) -> torch.Tensor:
        return self.store.get([sample.id])[0]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_store": None}

    def __repr__(self) -> str:
        return f"StoredEmbeddings({self.path!r})"


class ImageFiles:
    """The image at each sample's ``media`` path, as ``transform(PIL RGB image)``.

    ``check(samples)`` asks that every sample names an image (readers fill ``media``
    when given a ``media_key``); a file that cannot be read is reported by ``load`` with
    its path and the sample's id.
    """

    def __init__(self, transform: Callable[[Any], Any]) -> None:
        self.transform = transform

    def check(self, samples: Sequence[Any]) -> None:
        missing = [s.id for s in samples if not getattr(s, "media", None)]
        if missing:
            shown = ", ".join(repr(i) for i in missing[:20])
            raise ValueError(f"{len(missing)} sample(s) name no image file (read them with a "
                             f"media key): {shown}{' ...' if len(missing) > 20 else ''}")

    def load(self, sample: Any) -> Any:
        from PIL import Image

        try:
            with Image.open(sample.media) as im:
                image = im.convert("RGB")
        except Exception as e:  # PIL raises OSError, ValueError, SyntaxError, DecompressionBombError...
            raise DataFormatError(
                sample.media, f"cannot read the image of sample {sample.id!r}: {type(e).__name__}: {e}"
            ) from e
        return self.transform(image)

    def __repr__(self) -> str:
        return f"ImageFiles({self.transform!r})"
