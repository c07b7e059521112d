"""Precompute frozen image embeddings v = normalize(vision_proj(ViT(I))) into an EmbeddingStore.

Paper sec. 3.2 freezes BLIP's vision tower and trains only the text side, so every
image is encoded once, here, and training reads the cached vectors.

What ``vlr precompute --images SRC --encoder SPEC --out STORE`` expects:

- **Image ids.** An image's id is its path relative to the ``--images`` folder, without
  the extension, '/'-separated: ``images/2021/cat.jpg`` has id ``2021/cat``. A ``.txt``
  list gives the path as written in the list, without the extension; a ``.jsonl`` list
  gives ``{"id": ..., "path": ...}``. The ids of the training samples (``"id"``) and of
  the benchmark readers' items must be these ids.
- **The encoder spec.** ``blip:<hub name or folder>`` is BLIP's frozen image side
  (:class:`BlipImageEncoder`); ``mllm:FOLDER[:PROMPT]`` a CaRe / E5-V MLLM's
  (:class:`~vlr_plugins.mllm.model_spec.EOLImageEncoder`). ``module:callable`` (e.g. ``my_encoders:clip_l14``) is any
  Python object the command can import, the current folder searched first: a function
  or an object with ``__call__(images: list[PIL.Image.Image]) -> Tensor`` returning one
  finite row per image, (n, D); or a class, instantiated without arguments, whose
  instances are such callables. An ``int`` attribute ``dim`` sizes the store before the
  first batch; a ``str`` attribute ``name`` is recorded in the store's ``index.json``.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Any

import torch

from vlr_plugins.data.embedding_store import EmbeddingStore, EmbeddingStoreWriter, check_store_target
from vlr_plugins._imports import import_attr
from vlr_plugins.data._text_files import json_line, utf8_lines
from vlr_plugins.errors import DataFormatError, MissingFileError, _type_name, image_encoder_error

__all__ = [
    "IMAGE_SUFFIXES",
    "BlipImageEncoder",
    "decoded_batches",
    "list_images",
    "imported_image_encoder",
    "precompute_image_embeddings",
]

#: File suffixes (lower-case) that :func:`list_images` picks up from a folder.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp")
_MAX_LISTED = 20

ImageEncoder = Callable[[list[Any]], torch.Tensor]


def _path_id(written: str) -> str:
    """``dir/a.jpg`` -> ``dir/a``: a path without its extension, '/'-separated."""
    p = PurePosixPath(written.replace("\\", "/"))
    return str(p.with_suffix("")) if p.suffix else str(p)


def _images_in_folder(folder: Path) -> list[tuple[str, Path]]:
    found: dict[str, Path] = {}
    for path in folder.rglob("*"):
        rel = path.relative_to(folder)
        # hidden entries (.git, .ipynb_checkpoints, macOS "._x.jpg" resource forks) are not images
        if any(part.startswith(".") for part in rel.parts):
            continue
        if path.suffix.lower() not in IMAGE_SUFFIXES or not path.is_file():
            continue
        image_id = _path_id(rel.as_posix())
        if image_id in found:
            raise DataFormatError(
                folder, f"{found[image_id]} and {path} both give image id {image_id!r}"
            )
        found[image_id] = path
    return sorted(found.items())


def _images_in_list(list_file: Path) -> list[tuple[str, Path]]:
    base = list_file.parent
    suffix = list_file.suffix.lower()
    entries: list[tuple[str, Path]] = []
    first_seen: dict[str, int] = {}
    for line_no, line in utf8_lines(list_file):
        if not line.strip():
            continue
        if suffix == ".txt":
            written = line.strip()
            image_id = _path_id(written)
        else:
            image_id, written, _ = _list_entry(list_file, line_no, line)
        if image_id in first_seen:
            raise DataFormatError(
                list_file,
                f"duplicate image id {image_id!r}, first seen on line {first_seen[image_id]}",
                record=line_no,
                field="id" if suffix == ".jsonl" else None,
            )
        first_seen[image_id] = line_no
        path = Path(written)
        entries.append((image_id, path if path.is_absolute() else base / path))
    return entries


def _list_entry(list_file: Path, line_no: int, line: str) -> tuple[str, str, dict[str, Any]]:
    """``(id, path, the whole record)`` of a ``.jsonl`` list line (``{"id", "path", ...}``),
    for image and video lists alike; errors name the file, line and field."""
    def bad(field: str | None, problem: str) -> DataFormatError:
        return DataFormatError(list_file, problem, record=line_no, field=field)

    raw = json_line(list_file, line_no, line)
    if not isinstance(raw, dict):
        raise bad(None, f"expected a JSON object with 'id' and 'path', found {_type_name(raw)}")
    item_id, path = raw.get("id"), raw.get("path")
    if isinstance(item_id, bool) or not isinstance(item_id, (str, int)) or item_id == "":
        raise bad("id", f"expected a non-empty string or an integer, found {_type_name(item_id)}")
    if not isinstance(path, str) or not path:
        raise bad("path", f"expected a non-empty string, found {_type_name(path)}")
    return str(item_id), path, raw


def list_images(source: str | os.PathLike[str]) -> list[tuple[str, Path]]:
    """The ``(id, path)`` pairs of the images to encode.

    ``source`` is one of

    - a folder: every ``.jpg .jpeg .png .webp .bmp`` file below it (any case; hidden
      files and folders skipped), id = path relative to the folder without extension,
      '/'-separated (``2021/cat.jpg`` -> ``2021/cat``); sorted by id;
    - a ``.txt`` list: one path per line, id = the path as written without extension;
    - a ``.jsonl`` list: objects with ``id`` (string or integer) and ``path``.

    List files keep their order; relative paths in them are resolved against the list
    file's folder. Ids must be unique; two files giving the same id are a
    :class:`DataFormatError`, and so is a folder or list without any image. A source
    that does not exist is a :class:`~vlr_plugins.errors.MissingFileError`; so are listed
    files that do not exist, reported all at once.
    """
    source = Path(source)
    if source.is_dir():
        found = _images_in_folder(source)
        if not found:
            raise DataFormatError(
                source, f"no images in this folder or below it (image files end in {' '.join(IMAGE_SUFFIXES)}, "
                "any case; hidden files and folders are skipped)")
        return found
    if not source.is_file():
        raise MissingFileError(f"no image folder or list file at {source}")
    if source.suffix.lower() not in (".txt", ".jsonl"):
        raise DataFormatError(
            source,
            f"cannot list images from it: expected a folder, a .txt or a .jsonl list, "
            f"found suffix {source.suffix or '(none)'!r}"
        )
    entries = _images_in_list(source)
    if not entries:
        raise DataFormatError(source, "lists no images")
    missing = [str(p) for _, p in entries if not p.is_file()]
    if missing:
        more = len(missing) - _MAX_LISTED
        raise MissingFileError(
            f"{len(missing)} of the {len(entries)} images listed in {source} do not exist: "
            + ", ".join(missing[:_MAX_LISTED])
            + (f", ... and {more} more" if more > 0 else "")
        )
    return entries


class BlipImageEncoder:
    """BLIP's frozen image side: ``normalize(vision_proj(ViT(I)[:, 0]))``, (n, 256) for BLIP-base.

    Expects a list of PIL images; returns float32 L2-normalised rows on the CPU.

    This is exactly ``image_feat`` of transformers'
    ``BlipForImageTextRetrieval.forward(use_itm_head=False)``: the CLS token of the
    vision model's last hidden state (after its post-layernorm), through
    ``vision_proj``, L2-normalised. Only ``vision_model`` and ``vision_proj`` are kept;
    the text encoder is dropped after loading.

    Reference: paper sec. 3.2 (v = f_proj^img(Phi^img(I)), BLIP ViT-B base-COCO).

    Args:
        model_name_or_path: a ``BlipForImageTextRetrieval`` checkpoint whose folder also
            holds the ``BlipImageProcessor`` config (e.g. ``Salesforce/blip-itm-base-coco``).
        device: where to run the vision tower.
        dtype: its compute dtype; output is float32 either way.

    Example::

        >>> enc = BlipImageEncoder("Salesforce/blip-itm-base-coco", device="cuda")  # doctest: +SKIP
        >>> enc([Image.open("cat.jpg").convert("RGB")]).shape  # doctest: +SKIP
        torch.Size([1, 256])
    """

    def __init__(
        self,
        model_name_or_path: str | os.PathLike[str],
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        from transformers import BlipForImageTextRetrieval, BlipImageProcessor

        model = BlipForImageTextRetrieval.from_pretrained(model_name_or_path)
        self.processor = BlipImageProcessor.from_pretrained(model_name_or_path)
        self.device = torch.device(device)
        self.dtype = dtype
        self.vision_model = model.vision_model.to(device=self.device, dtype=dtype).eval()
        self.vision_proj = model.vision_proj.to(device=self.device, dtype=dtype).eval()
        self.dim: int = self.vision_proj.out_features
        self.name = os.fspath(model_name_or_path)

    def __repr__(self) -> str:
        return f"BlipImageEncoder({self.name!r}, device={str(self.device)!r}, dim={self.dim})"

    @torch.inference_mode()
    def __call__(self, images: Sequence[Any]) -> torch.Tensor:
        """``images``: n PIL images -> (n, D) float32."""
        pixel_values = self.processor(images=list(images), return_tensors="pt")["pixel_values"]
        pixel_values = pixel_values.to(device=self.device, dtype=self.dtype)
        hidden = self.vision_model(pixel_values=pixel_values).last_hidden_state
        image_feat = self.vision_proj(hidden[:, 0, :])
        return torch.nn.functional.normalize(image_feat.float(), dim=-1).cpu()


def imported_image_encoder(module_name: str, attr: str, what: str, kwargs: dict[str, Any]) -> ImageEncoder:
    """``attr`` (may be dotted) of ``module_name``, imported with the current folder searched
    first, as ``python -m`` does: a class is instantiated with ``kwargs``; anything else
    (a function, an instance) is returned as is and must be callable, mapping a list of RGB
    PIL images to an (n, D) tensor. ``what`` (option and spec) starts every message
    (:func:`vlr_plugins.specs.load_image_encoder` reads the spec)."""
    obj = import_attr(module_name, attr, lambda problem, kind: image_encoder_error(f"{what}: {problem}", kind))
    if inspect.isclass(obj):
        obj = obj(**kwargs)
    elif kwargs:
        raise TypeError(
            f"{what} names a {_type_name(obj)}, not a class; "
            f"it takes no keyword arguments (got {sorted(kwargs)})"
        )
    if not callable(obj):
        raise image_encoder_error(
            f"{what}: {_type_name(obj)} {obj!r} is not callable; expected a function or an object "
            "that maps a list of PIL images to an (n, D) tensor", TypeError)
    return obj


def _encoder_name(encoder: Any) -> str:
    name = getattr(encoder, "name", None)
    if isinstance(name, str):
        return name
    target = encoder if inspect.isroutine(encoder) else type(encoder)
    return f"{target.__module__}:{target.__qualname__}"


def decoded_batches(batches: Iterable[Sequence[tuple[str, Path]]],
                    pool: ThreadPoolExecutor | None) -> Iterator[tuple[Sequence[tuple[str, Path]], list]]:
    """Each batch of ``(id, path)`` with its images opened (RGB PIL images, in order). With a
    ``pool``, the next batch is opened by its threads while the caller encodes this one, so the
    encoder does not wait for decoding (at most two batches are held); a bad image raises when
    its batch is reached, after the batches before it. ``batches`` is read one ahead."""
    if pool is None:
        for batch in batches:
            yield batch, [_open_rgb(path) for _, path in batch]
        return
    pending = None
    for batch in batches:
        futures = [pool.submit(_open_rgb, path) for _, path in batch]
        if pending is not None:
            yield pending[0], [f.result() for f in pending[1]]
        pending = (batch, futures)
    if pending is not None:
        yield pending[0], [f.result() for f in pending[1]]


def _open_rgb(path: Path) -> Any:
    from PIL import Image

    try:
        with Image.open(path) as im:
            return im.convert("RGB")
    except Exception as e:  # PIL raises OSError, ValueError, SyntaxError, DecompressionBombError...
        raise DataFormatError(path, f"cannot read the image: {type(e).__name__}: {e}") from e


def _as_embeddings(out: Any, ids: Sequence[str], dim: int | None, name: str, dtype: torch.dtype) -> torch.Tensor:
    n = len(ids)
    try:
        emb = torch.as_tensor(out)
    except (TypeError, ValueError, RuntimeError) as e:
        raise image_encoder_error(
            f"image encoder {name} returned a {_type_name(out)}, expected an ({n}, D) tensor ({e})") from None
    if emb.ndim != 2 or emb.shape[0] != n or (dim is not None and emb.shape[1] != dim):
        expected = f"({n}, {dim if dim is not None else 'D'})"
        raise image_encoder_error(
            f"image encoder {name} returned shape {tuple(emb.shape)} for {n} images, "
            f"expected {expected}"
        )
    finite = torch.isfinite(emb.detach().to(device="cpu", dtype=dtype)).all(dim=1)
    if not bool(finite.all()):
        bad = ids[int((~finite).nonzero()[0])]
        raise image_encoder_error(
            f"image encoder {name} gave image {bad!r} an embedding that is not finite (NaN or inf) "
            f"as {str(dtype).removeprefix('torch.')}"
        )
    return emb


def precompute_image_embeddings(
    encoder: ImageEncoder,
    images: Sequence[tuple[str, str | os.PathLike[str]]],
    out_dir: str | os.PathLike[str],
    *,
    batch_size: int = 64,
    dtype: torch.dtype = torch.float32,
    shard_size: int = 100_000,
    meta: dict[str, Any] | None = None,
    progress: bool = True,
    overwrite: bool = False,
    num_workers: int = 4,
) -> EmbeddingStore:
    """Encode ``images`` once and write their embeddings to an :class:`EmbeddingStore`.

    Args:
        encoder: maps a list of RGB PIL images to an (n, D) tensor, e.g.
            ``load_image_encoder("blip:Salesforce/blip-itm-base-coco")`` (:mod:`vlr_plugins.specs`).
        images: ``(id, path)`` pairs, e.g. from :func:`list_images`; ids must be unique.
        out_dir: the store to create; written atomically (nothing appears on failure).
        batch_size: images per encoder call.
        dtype: storage dtype of the store (float32 or float16).
        shard_size: rows per safetensors shard.
        meta: extra ``index.json`` metadata; ``{"encoder": <encoder name>}`` is added
            unless ``meta`` sets ``"encoder"`` itself.
        progress: show a tqdm bar.
        overwrite: replace an existing store at ``out_dir``.
        num_workers: threads decoding images (0: decode in the calling thread).

    An unreadable image raises :class:`DataFormatError` naming the file. Returns the
    written store, opened.
    """
    from tqdm.auto import tqdm

    images = [(image_id, Path(path)) for image_id, path in images]
    first: dict[str, Path] = {}
    for image_id, path in images:
        if not isinstance(image_id, str):
            raise TypeError(f"image ids must be strings, found {_type_name(image_id)} for {path}")
        if image_id in first:
            raise ValueError(f"duplicate image id {image_id!r}: {first[image_id]} and {path}")
        first[image_id] = path
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, found {batch_size}")
    check_store_target(out_dir, overwrite=overwrite)  # fail before hours of encoding, not after

    name = _encoder_name(encoder)
    dim = getattr(encoder, "dim", None)
    dim = dim if isinstance(dim, int) and not isinstance(dim, bool) else None
    store_meta = {"encoder": name, **(meta or {})}

    def make_writer(d: int) -> EmbeddingStoreWriter:
        return EmbeddingStoreWriter(
            out_dir, d, dtype=dtype, shard_size=shard_size, meta=store_meta, overwrite=overwrite
        )

    writer = make_writer(dim) if dim is not None else None
    pool = ThreadPoolExecutor(num_workers) if num_workers > 0 else None
    try:
        bar = tqdm(total=len(images), unit="img", desc="encoding images", disable=not progress)
        with bar:
            batches = (images[start : start + batch_size] for start in range(0, len(images), batch_size))
            for batch, pil in decoded_batches(batches, pool):
                emb = _as_embeddings(encoder(pil), [i for i, _ in batch], dim, name, dtype)
                if writer is None:
                    dim = int(emb.shape[1])
                    writer = make_writer(dim)
                writer.add([i for i, _ in batch], emb)
                bar.update(len(batch))
        if writer is None:
            raise ValueError(
                f"no images to encode and encoder {name} has no 'dim' to size an empty store"
            )
        writer.close()
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return EmbeddingStore(out_dir)
