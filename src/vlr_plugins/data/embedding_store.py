"""An on-disk store of precomputed image embeddings, read lazily from safetensors shards.

Layout of a store directory::

    index.json                      {"format": "vlr-embedding-store", "version": 1,
                                     "dim": D, "dtype": "float32" | "float16", "count": n,
                                     "shards": [{"file": ..., "count": k}, ...],
                                     "ids": [...], "meta": {...}}
    embeddings-00000.safetensors    one tensor "embeddings" of shape (k, D)
    embeddings-00001.safetensors    ...

Row ``r`` of the store is the ``r``-th id of ``ids``; shards hold consecutive rows.
"""

from __future__ import annotations

import bisect
import json
import os
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import torch

from vlr_plugins._io import replace_dir
from vlr_plugins.errors import (
    ConfigError,
    DataFormatError,
    MissingEmbeddingsError,
    MissingFileError,
    OutputExistsError,
    _type_name,
)

__all__ = ["EmbeddingStore", "EmbeddingStoreWriter", "STORE_FORMAT", "STORE_VERSION", "check_store_target"]

STORE_FORMAT = "vlr-embedding-store"
STORE_VERSION = 1
_INDEX = "index.json"
_TENSOR = "embeddings"
_DTYPES = {"float32": torch.float32, "float16": torch.float16}
_SAFETENSORS_DTYPES = {"float32": "F32", "float16": "F16"}


def _dtype_name(dtype: torch.dtype | str) -> str:
    for name, d in _DTYPES.items():
        if dtype in (d, name):
            return name
    raise ValueError(f"embedding stores hold float32 or float16, not {dtype}")


def _as_id_list(ids: Sequence[str], what: str) -> list[str]:
    if isinstance(ids, str):
        raise TypeError(f"{what} takes a sequence of ids, not one string; use [{ids!r}]")
    return list(ids)


def _checked_rows(ids: Sequence[str], emb: torch.Tensor, dim: int, dtype: torch.dtype,
                  seen: set[str], what: str) -> tuple[list[str], torch.Tensor, set[str]]:
    """``ids`` as a list, ``emb`` as contiguous CPU rows of ``dtype``, and the set of the ids;
    refuses a wrong shape, an id repeated in the rows or already in ``seen``, and a row that
    is not finite (as ``dtype``)."""
    ids = _as_id_list(ids, what)
    emb = torch.as_tensor(emb)
    if emb.ndim != 2 or emb.shape[1] != dim:
        raise ValueError(f"expected embeddings of shape (n, {dim}), found {tuple(emb.shape)}")
    if len(ids) != emb.shape[0]:
        raise ValueError(f"got {len(ids)} ids for {emb.shape[0]} embeddings")
    batch: set[str] = set()
    for i in ids:
        if not isinstance(i, str):
            raise TypeError(f"ids must be strings, found {_type_name(i)} {i!r}")
        if i in seen or i in batch:
            raise ValueError(f"duplicate id {i!r}: each id is stored once")
        batch.add(i)
    emb = emb.detach().to(device="cpu", dtype=dtype).contiguous()
    finite = torch.isfinite(emb).all(dim=1)
    if not bool(finite.all()):
        bad = ids[int((~finite).nonzero()[0])]
        raise ValueError(f"the embedding of id {bad!r} is not finite (NaN or inf) as {_dtype_name(dtype)}")
    return ids, emb, batch


def _is_store(path: Path) -> bool:
    try:
        return json.loads((path / _INDEX).read_text("utf-8")).get("format") == STORE_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def check_store_target(out_dir: str | os.PathLike[str], *, overwrite: bool = False,
                       flag: str = "overwrite=True") -> None:
    """Raise :class:`~vlr_plugins.errors.OutputExistsError` unless a store may be
    written at ``out_dir``: nothing is there, or an empty folder, or (with ``overwrite``)
    a store. A file, or a non-empty folder that is not a store, is never replaced.

    ``flag`` is how the message tells the caller to overwrite (``vlr precompute`` says
    ``--overwrite``). :class:`EmbeddingStoreWriter` checks the same, again, when it
    moves the store into place.
    """
    out_dir = Path(out_dir)
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise OutputExistsError(f"cannot write an embedding store to {out_dir}: it is a file")
    if not any(out_dir.iterdir()):
        return
    if not _is_store(out_dir):
        # never delete a directory we did not write, whatever overwrite says
        raise OutputExistsError(
            f"cannot write an embedding store to {out_dir}: it is a non-empty directory without "
            f"a {STORE_FORMAT} {_INDEX}; refusing to replace it even with {flag}"
        )
    if not overwrite:
        raise OutputExistsError(
            f"an embedding store already exists at {out_dir}; pass {flag} to replace it"
        )


def _sibling(path: Path, tag: str) -> Path:
    return path.with_name(f".{path.name}.{tag}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


class EmbeddingStoreWriter:
    """Writes an :class:`EmbeddingStore`, atomically.

    Everything goes to a hidden sibling directory that is renamed onto ``out_dir`` by
    :meth:`close`, so an interrupted run leaves no half store behind. Used as a
    context manager, an exception inside the ``with`` discards what was written.
    An existing store at ``out_dir`` is replaced only with ``overwrite=True``; a
    non-empty directory that is not a store is never replaced.

    Args:
        out_dir: the store directory to create.
        dim: embedding width ``D``.
        dtype: storage dtype, ``torch.float32`` or ``torch.float16``; reads are float32.
        shard_size: rows per safetensors shard.
        meta: free JSON-serialisable metadata (e.g. the encoder), kept in ``index.json``.
        overwrite: replace an existing store at ``out_dir``.

    Example::

        >>> with EmbeddingStoreWriter("emb/cc3m", dim=256) as w:  # doctest: +SKIP
        ...     w.add(["img1", "img2"], torch.randn(2, 256))
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        dim: int,
        *,
        dtype: torch.dtype = torch.float32,
        shard_size: int = 100_000,
        meta: dict[str, Any] | None = None,
        overwrite: bool = False,
    ) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"dim must be a positive integer, found {dim!r}")
        if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size <= 0:
            raise ValueError(f"shard_size must be a positive integer, found {shard_size!r}")
        self.out_dir = Path(out_dir)
        self.dim = dim
        self.dtype_name = _dtype_name(dtype)
        self.dtype = _DTYPES[self.dtype_name]
        self.shard_size = shard_size
        self.meta = dict(meta or {})
        try:
            json.dumps(self.meta)
        except (TypeError, ValueError) as e:
            raise TypeError(f"meta must be JSON-serialisable: {e}") from None
        self.overwrite = overwrite
        check_store_target(self.out_dir, overwrite=overwrite)

        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = _sibling(self.out_dir, "tmp")
        self._tmp.mkdir()
        self._ids: list[str] = []
        self._seen: set[str] = set()
        self._pending: list[torch.Tensor] = []
        self._pending_rows = 0
        self._shards: list[dict[str, Any]] = []
        self._state = "open"

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, ids: Sequence[str], emb: torch.Tensor) -> None:
        """Append rows. ``ids``: n distinct new strings; ``emb``: (n, D)."""
        if self._state != "open":
            raise RuntimeError(f"this EmbeddingStoreWriter for {self.out_dir} is {self._state}")
        ids, emb, batch = _checked_rows(ids, emb, self.dim, self.dtype, self._seen, "EmbeddingStoreWriter.add")
        self._ids.extend(ids)
        self._seen.update(batch)
        self._pending.append(emb)
        self._pending_rows += len(ids)
        while self._pending_rows >= self.shard_size:
            self._write_shard(self.shard_size)

    def _write_shard(self, rows: int) -> None:
        from safetensors.torch import save_file

        block = torch.cat(self._pending) if len(self._pending) > 1 else self._pending[0]
        shard, rest = block[:rows].contiguous(), block[rows:]
        self._pending = [rest.clone()] if len(rest) else []
        self._pending_rows = len(rest)
        name = f"embeddings-{len(self._shards):05d}.safetensors"
        save_file({_TENSOR: shard}, str(self._tmp / name))
        self._shards.append({"file": name, "count": rows})

    def close(self) -> Path:
        """Write the last shard and ``index.json``, then move the store into place."""
        if self._state == "closed":
            return self.out_dir
        if self._state != "open":
            raise RuntimeError(f"this EmbeddingStoreWriter for {self.out_dir} was aborted")
        try:
            if self._pending_rows:
                self._write_shard(self._pending_rows)
            index = {
                "format": STORE_FORMAT,
                "version": STORE_VERSION,
                "dim": self.dim,
                "dtype": self.dtype_name,
                "count": len(self._ids),
                "shards": self._shards,
                "ids": self._ids,
                "meta": self.meta,
            }
            with open(self._tmp / _INDEX, "x", encoding="utf-8") as f:
                json.dump(index, f, ensure_ascii=False)
            self._move_into_place()
        except BaseException:
            self.abort()
            raise
        self._state = "closed"
        return self.out_dir

    def _move_into_place(self) -> None:
        check_store_target(self.out_dir, overwrite=self.overwrite)  # it may have appeared since __init__
        replace_dir(self._tmp, self.out_dir, aside=_sibling(self.out_dir, "old"))

    def abort(self) -> None:
        """Discard everything written so far; ``out_dir`` is left as it was."""
        if self._state == "open":
            self._state = "aborted"
        self._pending = []
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> EmbeddingStoreWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class EmbeddingStore:
    """Reads an embedding store written by :class:`EmbeddingStoreWriter`.

    ``index.json`` is read at once; embedding rows are read on demand from
    memory-mapped safetensors shards, whose handles stay open until :meth:`close`.
    A store pickles without its handles, so it can be handed to DataLoader workers.

    Example::

        >>> store = EmbeddingStore("emb/cc3m")  # doctest: +SKIP
        >>> store.check([s.id for s in samples], dim=256)  # doctest: +SKIP
        >>> v = store.get(["img7", "img3"])  # (2, 256) float32, rows in that order
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        index_path = self.path / _INDEX
        if not index_path.is_file():
            what = "not a directory" if not self.path.is_dir() else f"{index_path} not found"
            raise MissingFileError(
                f"no embedding store at {self.path}: {what} "
                "(an interrupted precompute leaves no store; run it again)"
            )
        try:
            index = json.loads(index_path.read_text("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise DataFormatError(index_path, f"not valid JSON: {e}") from None
        self._read_index(index, index_path)
        self._handles: dict[int, Any] = {}

    def _read_index(self, index: Any, index_path: Path) -> None:
        def bad(field: str | None, problem: str) -> DataFormatError:
            return DataFormatError(index_path, problem, field=field)

        if not isinstance(index, dict):
            raise bad(None, f"expected a JSON object, found {_type_name(index)}")
        if index.get("format") != STORE_FORMAT:
            raise bad("format", f"expected {STORE_FORMAT!r}, found {index.get('format')!r}")
        if index.get("version") != STORE_VERSION:
            raise bad(
                "version",
                f"this vlr_plugins reads version {STORE_VERSION}, found {index.get('version')!r}",
            )
        dim = index.get("dim")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
            raise bad("dim", f"expected a positive integer, found {dim!r}")
        if index.get("dtype") not in _DTYPES:
            raise bad("dtype", f"expected one of {sorted(_DTYPES)}, found {index.get('dtype')!r}")
        ids = index.get("ids")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise bad("ids", "expected a list of strings")
        shards = index.get("shards")
        if not isinstance(shards, list) or not all(
            isinstance(s, dict)
            and isinstance(s.get("file"), str)
            and Path(s["file"]).name == s["file"]  # a plain name: shards live in the store
            and isinstance(s.get("count"), int)
            and s["count"] >= 0
            for s in shards
        ):
            raise bad("shards", 'expected a list of {"file": <name>, "count": <int>}')
        total = sum(s["count"] for s in shards)
        if not (index.get("count") == len(ids) == total):
            raise bad(
                "count",
                f"count {index.get('count')!r}, {len(ids)} ids and {total} shard rows disagree",
            )
        meta = index.get("meta", {})
        if not isinstance(meta, dict):
            raise bad("meta", f"expected an object, found {_type_name(meta)}")

        self.dim: int = dim
        self.dtype: torch.dtype = _DTYPES[index["dtype"]]
        self.meta: dict[str, Any] = meta
        self._ids = tuple(ids)
        self._row: dict[str, int] = {}
        for r, i in enumerate(ids):
            if self._row.setdefault(i, r) != r:
                raise bad("ids", f"duplicate id {i!r} at positions {self._row[i]} and {r}")
        self._shards = [(s["file"], s["count"]) for s in shards]
        self._starts = [0]  # first row of each shard
        for _, count in self._shards:
            self._starts.append(self._starts[-1] + count)
        self._list_index: bool | None = None  # whether safetensors slices take index lists

    @property
    def ids(self) -> tuple[str, ...]:
        """All ids, in row order."""
        return self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, id: object) -> bool:
        return id in self._row

    def __repr__(self) -> str:
        return (
            f"EmbeddingStore({os.fspath(self.path)!r}, count={len(self)}, dim={self.dim}, "
            f"dtype={str(self.dtype).removeprefix('torch.')}, shards={len(self._shards)})"
        )

    def index_of(self, id: str) -> int:
        """The row of ``id``."""
        try:
            return self._row[id]
        except KeyError:
            raise MissingEmbeddingsError([id], self.path) from None

    def check(self, ids: Sequence[str], dim: int | None = None) -> None:
        """Raise unless every id has a row, every shard file is there and holds what
        ``index.json`` says, and, if ``dim`` is given, rows are ``dim`` wide.

        Raises :class:`~vlr_plugins.errors.ConfigError` (a ``ValueError``) for a width
        mismatch, :class:`MissingEmbeddingsError` listing every missing id, and a
        :class:`~vlr_plugins.errors.MissingFileError` or :class:`DataFormatError` naming
        a shard that is missing or unreadable; run it before training rather than mid-epoch.
        """
        if dim is not None and dim != self.dim:
            raise ConfigError(
                f"embedding store {self.path} holds {self.dim}-d embeddings, expected {dim}-d"
            )
        ids = _as_id_list(ids, "EmbeddingStore.check")
        missing = [i for i in dict.fromkeys(ids) if i not in self._row]
        if missing:
            raise MissingEmbeddingsError(missing, self.path)
        for shard in range(len(self._shards)):
            self._slice(shard)  # opens the file and checks its header: shape and dtype

    def get(self, ids: Sequence[str]) -> torch.Tensor:
        """The embeddings of ``ids``: (n, D) float32, rows in the order of ``ids``."""
        ids = _as_id_list(ids, "EmbeddingStore.get")
        rows = [self._row.get(i, -1) for i in ids]
        if -1 in rows:
            missing = [i for i in dict.fromkeys(ids) if i not in self._row]
            raise MissingEmbeddingsError(missing, self.path)
        out = torch.empty(len(ids), self.dim, dtype=torch.float32)
        positions_by_shard: dict[int, list[int]] = {}
        for pos, row in enumerate(rows):
            shard = bisect.bisect_right(self._starts, row) - 1
            positions_by_shard.setdefault(shard, []).append(pos)
        for shard, positions in positions_by_shard.items():
            start = self._starts[shard]
            local = sorted({rows[p] - start for p in positions})
            block = self._read_rows(shard, local)
            row_in_block = {r: k for k, r in enumerate(local)}
            # explicit index tensors: torch's indexing by Python lists is slow
            take = torch.tensor([row_in_block[rows[p] - start] for p in positions])
            out[torch.tensor(positions)] = block[take]
        return out

    def _read_rows(self, shard: int, rows: list[int]) -> torch.Tensor:
        """Rows (sorted, distinct) of one shard, as float32."""
        sl = self._slice(shard)
        if self._list_index is not False:
            try:
                block = sl[rows]
            except Exception:
                if self._list_index:
                    raise
                self._list_index = False  # an older safetensors: slices only
            else:
                self._list_index = True
                return block.to(torch.float32)
        bounds = [0, *(k for k in range(1, len(rows)) if rows[k] != rows[k - 1] + 1), len(rows)]
        runs = [sl[rows[a] : rows[b - 1] + 1] for a, b in zip(bounds[:-1], bounds[1:])]
        return torch.cat(runs).to(torch.float32)

    def _slice(self, shard: int) -> Any:
        if shard not in self._handles:
            from safetensors import safe_open

            name, count = self._shards[shard]
            file = self.path / name
            if not file.is_file():
                raise MissingFileError(f"embedding store {self.path} is missing its shard {file}")
            try:
                f = safe_open(str(file), framework="pt")
                handle = f.get_slice(_TENSOR)
            except Exception as e:
                raise DataFormatError(file, f"cannot read tensor {_TENSOR!r}: {e}") from e
            expected = [count, self.dim]
            dtype = _SAFETENSORS_DTYPES[_dtype_name(self.dtype)]
            if list(handle.get_shape()) != expected or handle.get_dtype() != dtype:
                raise DataFormatError(
                    file,
                    f"expected {_TENSOR!r} of shape {expected} and dtype {dtype} as {_INDEX} "
                    f"says, found shape {list(handle.get_shape())} and dtype {handle.get_dtype()}",
                )
            # keep the file object too: the slice alone may not keep the file mapped
            self._handles[shard] = (f, handle)
        return self._handles[shard][1]

    def close(self) -> None:
        """Release the shard handles; later reads reopen them."""
        self._handles.clear()

    def __enter__(self) -> EmbeddingStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_handles"] = {}  # safetensors handles do not pickle; workers reopen lazily
        return state
