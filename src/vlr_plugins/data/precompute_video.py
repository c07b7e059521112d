"""Precompute frozen video embeddings into an EmbeddingStore, resumably.

What ``vlr precompute --videos SRC --encoder SPEC --out STORE`` expects:

- **Video ids.** As for images: a video's id is its path relative to the ``--videos``
  folder without the extension, '/'-separated (``clips/2021/cat.mp4`` -> ``2021/cat``); a
  ``.txt`` list gives the path as written without the extension; a ``.jsonl`` list gives
  ``{"id", "path", "start"?, "end"?}``, ``start`` / ``end`` in seconds for an item that is
  a clip of a longer video. ``--benchmarks`` takes the ids the benchmarks' readers give,
  so that ``vlr eval`` finds them.
- **The encoder spec** (:func:`load_video_encoder`): ``open_clip:MODEL[:PRETRAINED]``, a
  tower config file (``.yaml`` / ``.json``), or ``module:callable`` returning a
  :class:`~vlr_plugins.vision.VideoTower`.
- **Frames.** Each video gives ``frames`` frames picked by ``sampler``
  (:func:`~vlr_plugins.data.video.frame_indices`), resized and centre-cropped to the tower's
  ``image_size`` and normalised with its ``image_mean`` / ``image_std``; the store's
  ``meta`` records all of it, so a store can be checked against a benchmark's protocol.
- **Bad files.** A video that cannot be decoded is listed, with the decoder's reason, in a
  failures file beside the store (``STORE.failures.jsonl``) and the run goes on.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
import pickle
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from vlr_plugins.data._text_files import read_utf8, utf8_lines
from vlr_plugins.data.embedding_store import EmbeddingStore
from vlr_plugins.data.errors import DataFormatError, VideoEncoderError, _type_name
from vlr_plugins.data.precompute import _current_folder_importable, _path_id
from vlr_plugins.data.resumable_store import (
    ResumableEmbeddingStoreWriter,
    _named,
    check_resumable_target,
    work_dir_of,
)
from vlr_plugins.data.video import VIDEO_BACKENDS, VideoDecodeError, sample_frames, video_transform
from vlr_plugins.errors import MissingFileError, loading_pretrained

__all__ = [
    "VIDEO_SAMPLERS",
    "VIDEO_SUFFIXES",
    "VideoItem",
    "benchmark_videos",
    "failures_path_of",
    "list_videos",
    "load_video_encoder",
    "precompute_video_embeddings",
    "video_store_meta",
]

#: File suffixes (lower-case) that :func:`list_videos` picks up from a folder: those of the
#: video benchmarks (MSR-VTT .mp4, MSVD and LSMDC .avi, DiDeMo's Flickr files .mp4 .m4v .mov
#: .avi .mpg .wmv .3gp ..., ActivityNet .mp4 .mkv .webm) and the other common containers.
VIDEO_SUFFIXES = (".mp4", ".avi", ".mkv", ".webm", ".mov", ".m4v", ".mpg", ".mpeg", ".flv", ".wmv", ".3gp")
#: The frame samplers a store can be written with: they give every video the same number
#: of frames (``fps`` does not, so it is not one of them).
VIDEO_SAMPLERS = ("rand", "middle", "uniform")
_TOWER_TYPES = ("FramePooledVideoEncoder", "SpaceTimeViT")
_CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
_SHOWN = 5


class VideoItem(NamedTuple):
    """One video to encode: its id, its file, and for a clip of a longer video the seconds
    ``start`` / ``end`` it spans (``None``: the video's start / end)."""

    id: str
    path: Path
    start: float | None = None
    end: float | None = None

    @property
    def window(self) -> tuple[float | None, float | None] | None:
        """``(start, end)`` for :func:`~vlr_plugins.data.video.sample_frames`, or ``None``."""
        return None if self.start is None and self.end is None else (self.start, self.end)


# --------------------------------------------------------------------------- listing


def _videos_in_folder(folder: Path) -> list[VideoItem]:
    found: dict[str, Path] = {}
    for path in folder.rglob("*"):
        rel = path.relative_to(folder)
        if any(part.startswith(".") for part in rel.parts):  # .git, macOS "._x.mp4" forks
            continue
        if path.suffix.lower() not in VIDEO_SUFFIXES or not path.is_file():
            continue
        video_id = _path_id(rel.as_posix())
        if video_id in found:
            raise DataFormatError(folder, f"{found[video_id]} and {path} both give video id {video_id!r}")
        found[video_id] = path
    return [VideoItem(i, p) for i, p in sorted(found.items())]


def _seconds(raw: dict[str, Any], key: str, bad: Any) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise bad(key, f"expected seconds, a number >= 0, found {json.dumps(value)}")
    return float(value)


def _list_record(list_file: Path, line_no: int, line: str) -> tuple[str, str, float | None, float | None]:
    def bad(field: str | None, problem: str) -> DataFormatError:
        return DataFormatError(list_file, problem, record=line_no, field=field)

    try:
        raw = json.loads(line)
    except json.JSONDecodeError as e:
        raise bad(None, f"invalid JSON: {e.msg} (column {e.colno})") from None
    if not isinstance(raw, dict):
        raise bad(None, f"expected a JSON object with 'id' and 'path', found {_type_name(raw)}")
    video_id, path = raw.get("id"), raw.get("path")
    if isinstance(video_id, bool) or not isinstance(video_id, (str, int)) or video_id == "":
        raise bad("id", f"expected a non-empty string or an integer, found {_type_name(video_id)}")
    if not isinstance(path, str) or not path:
        raise bad("path", f"expected a non-empty string, found {_type_name(path)}")
    start, end = _seconds(raw, "start", bad), _seconds(raw, "end", bad)
    if start is not None and end is not None and not end > start:
        raise bad("end", f"expected the end after the start ({start:g} s), found {end:g} s")
    return str(video_id), path, start, end


def _videos_in_list(list_file: Path) -> list[VideoItem]:
    items: list[VideoItem] = []
    first_seen: dict[str, int] = {}
    jsonl = list_file.suffix.lower() == ".jsonl"
    for line_no, line in utf8_lines(list_file):
        if not line.strip():
            continue
        if jsonl:
            video_id, written, start, end = _list_record(list_file, line_no, line)
        else:
            written, start, end = line.strip(), None, None
            video_id = _path_id(written)
        if video_id in first_seen:
            raise DataFormatError(list_file, f"duplicate video id {video_id!r}, first seen on line "
                                             f"{first_seen[video_id]}", record=line_no, field="id" if jsonl else None)
        first_seen[video_id] = line_no
        path = Path(written)
        items.append(VideoItem(video_id, path if path.is_absolute() else list_file.parent / path, start, end))
    return items


def _some_exist(items: Sequence[VideoItem], where: str) -> None:
    """A list none of whose files exist names the wrong folder: refuse it before any work.
    Some missing files are failures of the run, reported with the undecodable ones."""
    if items and not any(item.path.exists() for item in items):
        shown = ", ".join(str(item.path) for item in items[:_SHOWN])
        more = f", ... and {len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
        raise MissingFileError(f"none of the {len(items)} videos {where} exist: {shown}{more}")


def list_videos(source: str | os.PathLike[str]) -> list[VideoItem]:
    """The videos to encode, as :class:`VideoItem` (id, path, start, end).

    ``source`` is one of

    - a folder: every file below it ending in one of :data:`VIDEO_SUFFIXES` (any case;
      hidden files and folders skipped), id = path relative to the folder without the
      extension, '/'-separated (``2021/cat.mp4`` -> ``2021/cat``); sorted by id;
    - a ``.txt`` list: one path per line, id = the path as written without the extension;
    - a ``.jsonl`` list: objects with ``id`` (string or integer) and ``path``, and for a clip
      of a longer video ``start`` and/or ``end`` in seconds (one file may give many clips).

    List files keep their order; relative paths in them are taken from the list file's
    folder. Ids must be unique (a :class:`DataFormatError` names both places). A source that
    is not there, or a list none of whose files exist, is a
    :class:`~vlr_plugins.errors.MissingFileError`; a listed file that is missing while others
    exist is reported by the run as a failure, like a file that cannot be decoded.
    """
    source = Path(source)
    if source.is_dir():
        found = _videos_in_folder(source)
        if not found:
            raise DataFormatError(source, f"no videos in this folder or below it (video files end in "
                                          f"{' '.join(VIDEO_SUFFIXES)}, any case; hidden files and folders are skipped)")
        return found
    if not source.is_file():
        raise MissingFileError(f"no video folder or list at {source}")
    if source.suffix.lower() not in (".txt", ".jsonl"):
        raise DataFormatError(source, f"cannot list videos from it: expected a folder, a .txt or a .jsonl list, "
                                      f"found suffix {source.suffix or '(none)'!r}")
    items = _videos_in_list(source)
    if not items:
        raise DataFormatError(source, "lists no videos")
    _some_exist(items, f"listed in {source}")
    return items


def _benchmark_specs(path: str) -> list[Any]:
    """``load_benchmark_specs(path)``, except that a benchmark's store need not exist yet:
    it is often the one this run writes."""
    from vlr_plugins.eval import benchmarks

    try:
        return benchmarks.load_benchmark_specs(path)
    except DataFormatError as e:
        if e.field != "item_embeddings":
            raise
    # every other check passed; read each benchmark again, keeping the one whose store is missing
    base = os.path.dirname(os.path.abspath(path))
    first: dict[str, int] = {}
    specs = []
    for i, entry in enumerate(benchmarks._parse_yaml(path)["benchmarks"], start=1):
        try:
            specs.append(benchmarks._spec(path, base, i, entry, first))
        except DataFormatError as e:
            if e.field != "item_embeddings":
                raise
            resolved = {k: entry[k] if os.path.isabs(entry[k]) else os.path.join(base, entry[k])
                        for k in ("path", "item_embeddings")}
            kinds = entry.get("text_kinds")
            specs.append(benchmarks.BenchmarkSpec(
                name=entry["name"], reader=entry["reader"], args=dict(entry.get("args") or {}),
                max_tokens=entry.get("max_tokens"), text_kinds=tuple(kinds) if kinds else None,
                source=f"{path}, benchmark {i}", **resolved))
    return specs


def benchmark_videos(path: str | os.PathLike[str]) -> list[VideoItem]:
    """Every video of the benchmarks in a ``vlr eval`` benchmarks file, with the item ids their
    readers give (so ``vlr eval`` finds them in the store), each id once.

    Each benchmark is read as ``vlr eval`` reads it
    (:func:`~vlr_plugins.eval.benchmarks.read_benchmark`: the reader, its ``args`` such as
    ``media_root``, its ``text_kinds``); benchmarks that list no media files are skipped.
    Its ``item_embeddings`` store need not exist yet. Two benchmarks may share items (the same
    id and file); the same id for two different files is a :class:`DataFormatError`.
    Problems in the file are reported as ``vlr eval`` reports them.
    """
    from vlr_plugins.eval.benchmarks import read_benchmark

    path = os.fspath(path)
    items: dict[str, VideoItem] = {}
    origin: dict[str, str] = {}
    for spec in _benchmark_specs(path):
        for retrieval_set in read_benchmark(spec):
            if retrieval_set.media is None:
                break
            for item_id, media in zip(retrieval_set.item_ids, retrieval_set.media_paths()):
                video = Path(os.path.normpath(media))
                if item_id not in items:
                    items[item_id], origin[item_id] = VideoItem(item_id, video), spec.name
                elif items[item_id].path != video:
                    raise DataFormatError(path, f"benchmarks {origin[item_id]!r} and {spec.name!r} give item "
                                                f"{item_id!r} two files, {items[item_id].path} and {video}; "
                                                "one store holds one row per id")
    if not items:
        raise DataFormatError(path, "none of its benchmarks lists media files (videos) to encode")
    found = list(items.values())
    _some_exist(found, f"of the benchmarks in {path}")
    return found


# --------------------------------------------------------------------------- encoders


def _tower_error(what: str, problem: str) -> VideoEncoderError:
    return VideoEncoderError(f"{what}: {problem}")


@contextlib.contextmanager
def _quiet_root_log() -> Iterator[None]:
    """open_clip logs a failed download on the root logger before raising it; the raised
    error is reported once, as a ModelLoadError."""
    previous = logging.root.manager.disable
    logging.disable(logging.ERROR)
    try:
        yield
    finally:
        logging.disable(previous)


def _open_clip_encoder(rest: str, what: str, setting: str) -> Any:
    from vlr_plugins.vision import FramePooledVideoEncoder

    if not rest:
        raise _tower_error(what, "needs a model name after 'open_clip:' (e.g. open_clip:ViT-B-16:openai)")
    if rest.startswith(("hf-hub:", "local-dir:")):  # open_clip's own schemes carry their weights
        model_name, pretrained = rest, None
    else:
        model_name, _, tag = rest.partition(":")
        pretrained = tag or None
    try:
        import open_clip
    except ImportError as e:
        raise _tower_error(what, f"needs open_clip (pip install open_clip_torch): {e}") from None
    if model_name == rest.split(":")[0] and model_name.replace("/", "-") not in open_clip.list_models():
        raise _tower_error(what, f"open_clip has no model {model_name!r} "
                                 "(python -c 'import open_clip; print(open_clip.list_models())' lists them)")
    if pretrained and not os.path.isfile(pretrained) \
            and pretrained not in open_clip.list_pretrained_tags_by_model(model_name):
        tags = open_clip.list_pretrained_tags_by_model(model_name)
        tags = ", ".join(tags[:_SHOWN]) + (f", ... ({len(tags)} in all)" if len(tags) > _SHOWN else "") or "none"
        raise _tower_error(what, f"{pretrained!r} is neither a checkpoint file nor a pretrained tag of "
                                 f"{model_name} (its tags: {tags})")
    with loading_pretrained(f"{model_name}:{pretrained}" if pretrained else model_name, setting), _quiet_root_log():
        try:
            model = open_clip.create_model(model_name, pretrained=pretrained)
        except (RuntimeError, ValueError, KeyError, pickle.UnpicklingError) as e:
            cause = e.__cause__ or e.__context__
            if isinstance(cause, OSError):  # open_clip wraps a failed download in a RuntimeError
                raise cause from e
            raise _tower_error(what, f"cannot build it: {type(e).__name__}: {e}") from e
    return FramePooledVideoEncoder(tower=model)


def _configured_encoder(path: Path, what: str, setting: str) -> Any:
    import yaml

    from vlr_plugins.registry import MODELS
    from vlr_plugins.vision import load_video_checkpoint

    if not path.is_file():
        raise MissingFileError(f"{setting}: no tower config at {path}" + (" (it is a folder)" if path.is_dir() else ""))
    try:
        cfg = yaml.safe_load(read_utf8(path))
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or " ".join(str(e).split())
        raise _tower_error(what, f"not valid YAML or JSON: {problem}") from None
    if not isinstance(cfg, dict):
        raise _tower_error(what, f"expected a mapping with 'type' ({' or '.join(_TOWER_TYPES)}) and its arguments, "
                                 f"found {_type_name(cfg)}")
    cfg = dict(cfg)
    kind = cfg.pop("type", None)
    if kind not in _TOWER_TYPES:
        raise _tower_error(f"{what}, field 'type'", f"expected one of {', '.join(_TOWER_TYPES)}, found {kind!r}")
    checkpoint = cfg.pop("checkpoint", None)
    layout = cfg.pop("checkpoint_layout", "native" if kind == "FramePooledVideoEncoder" else "auto")
    if checkpoint is not None and (not isinstance(checkpoint, str) or not checkpoint):
        raise _tower_error(f"{what}, field 'checkpoint'", f"expected a file path, found {json.dumps(checkpoint)}")
    with loading_pretrained(str(path), setting), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # a tower without a checkpoint starts the same in every run, so reruns agree
        try:
            model = MODELS.get(kind)(**cfg)
        except (TypeError, ValueError, KeyError, RuntimeError) as e:
            message = e.args[0] if isinstance(e, KeyError) and e.args else e
            raise _tower_error(what, f"cannot build a {kind} from it: {message}") from e
    if checkpoint is not None:
        file = Path(checkpoint) if os.path.isabs(checkpoint) else path.parent / checkpoint
        if not file.exists():
            raise MissingFileError(f"{what}, field 'checkpoint': no checkpoint at {file}")
        try:
            load_video_checkpoint(model, file, layout=layout)
        except (ValueError, KeyError, TypeError, FileNotFoundError) as e:
            message = str(e.args[0] if isinstance(e, KeyError) and e.args else e)
            raise _tower_error(f"{what}, field 'checkpoint'",
                               message if str(file) in message else f"{file}: {message}") from e
    return model


def _imported_encoder(spec: str, what: str) -> Any:
    import importlib

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise _tower_error(what, "expected open_clip:MODEL[:PRETRAINED], a tower config (.yaml, .yml or .json) "
                                 "or module.sub:callable")
    try:
        with _current_folder_importable():
            obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise _tower_error(what, f"cannot import {module_name!r}: {e} (searched the current folder {os.getcwd()} "
                                 "and the installed packages)") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise _tower_error(what, f"{module_name} has no {attr!r}") from None
    if inspect.isclass(obj) or (callable(obj) and not hasattr(obj, "encode_video")):
        try:
            inspect.signature(obj).bind()
        except TypeError as e:
            raise _tower_error(what, f"{attr} is called without arguments to make the tower, and it needs some ({e})")
        except ValueError:  # a builtin without a signature: call it and see
            pass
        obj = obj()
    return obj


def _tower_geometry(tower: Any, what: str) -> tuple[int, tuple[float, ...], tuple[float, ...]]:
    """The tower's square input side and normalisation, or one error saying what it lacks."""
    from vlr_plugins.data.video import normalization_of

    needed = ("encode_video", "image_mean", "image_std", "image_size")
    missing = [a for a in needed if not hasattr(tower, a)]
    if missing or not callable(tower.encode_video):
        raise _tower_error(what, f"a {type(tower).__name__} is not a video tower (it lacks {', '.join(missing) or 'a callable encode_video'}); "
                                 "expected encode_video(frames (B, T, 3, H, W)) -> (B, D) and the attributes image_mean, "
                                 "image_std, image_size (vlr_plugins.vision.VideoTower)")
    try:
        mean, std = normalization_of({"mean": tower.image_mean, "std": tower.image_std})
    except (ValueError, TypeError) as e:
        raise _tower_error(what, f"its image_mean / image_std: {e}") from None
    size = tower.image_size
    if not isinstance(size, int):
        try:
            h, w = (int(s) for s in size)
        except (TypeError, ValueError):
            h, w = -1, -2
        if h != w:
            raise _tower_error(what, f"its image_size must be one side or (side, side): frames are cropped square, "
                                     f"found {size!r}")
        size = h
    if isinstance(size, bool) or size < 1:
        raise _tower_error(what, f"its image_size must be a positive integer, found {size!r}")
    return size, mean, std


def load_video_encoder(spec: str, *, setting: str = "encoder spec", device: str | torch.device = "cpu") -> Any:
    """Build a video tower (:class:`~vlr_plugins.vision.VideoTower`) from a string, as the CLI names one.

    - ``"open_clip:MODEL[:PRETRAINED]"``: open_clip's ``MODEL`` image tower, run on every frame
      and mean-pooled (:class:`~vlr_plugins.vision.FramePooledVideoEncoder`); ``PRETRAINED`` is
      a local checkpoint file or one of open_clip's pretrained tags for the model (without
      it, random weights). ``open_clip:hf-hub:ORG/REPO`` loads a Hub model with its weights.
      A model that cannot be fetched (offline, not cached) is one
      :class:`~vlr_plugins.errors.ModelLoadError` naming it and ``setting``.
    - a ``.yaml`` / ``.yml`` / ``.json`` file: ``type: FramePooledVideoEncoder`` or
      ``type: SpaceTimeViT`` and that class's arguments (e.g. ``tower: {kind: timm, ...}``),
      plus an optional ``checkpoint:`` (relative to the file) loaded with
      :func:`~vlr_plugins.vision.load_video_checkpoint` in ``checkpoint_layout`` (default
      ``native`` for a frame-pooled tower, ``auto`` for a space-time ViT). A tower without a
      checkpoint is initialised from seed 0, so that every run (and a resumed one) builds the
      same weights.
    - ``"module.sub:attr"``: imports ``module.sub`` (the current folder first, as ``python -m``
      does) and takes ``attr``: a tower itself, or a class or function called without
      arguments that returns one.

    The tower must offer ``encode_video(frames (B, T, 3, H, W)) -> (B, D)`` and ``image_mean``,
    ``image_std``, ``image_size`` (square). A ``torch.nn.Module`` is moved to ``device`` and put
    in eval mode. Every problem with the spec is one
    :class:`~vlr_plugins.data.errors.VideoEncoderError` (or a
    :class:`~vlr_plugins.errors.MissingFileError` for a file that is not there) whose message
    starts with ``setting`` (``vlr precompute`` passes ``"--encoder"``).

    Example::

        >>> enc = load_video_encoder("open_clip:ViT-B-16:openai", device="cuda")  # doctest: +SKIP
        >>> enc.encode_video(frames).shape  # frames (2, 16, 3, 224, 224)  # doctest: +SKIP
        torch.Size([2, 512])
    """
    what = f"{setting} {spec!r}"
    if spec.startswith("open_clip:"):
        tower = _open_clip_encoder(spec[len("open_clip:"):], what, setting)
    elif Path(spec).suffix.lower() in _CONFIG_SUFFIXES:
        tower = _configured_encoder(Path(spec), what, setting)
    else:
        tower = _imported_encoder(spec, what)
    _tower_geometry(tower, what)
    if isinstance(tower, torch.nn.Module):
        tower = tower.to(device).eval()
    return tower


def _tower_dim(tower: Any) -> int | None:
    for attr in ("embed_dim", "dim"):
        value = getattr(tower, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _tower_device(tower: Any) -> torch.device:
    if isinstance(tower, torch.nn.Module):
        for tensor in (*tower.parameters(), *tower.buffers()):
            return tensor.device
    return torch.device("cpu")


# --------------------------------------------------------------------------- precompute


def video_store_meta(tower: Any, encoder: str, *, frames: int, sampler: str, seed: int, backend: str) -> dict[str, Any]:
    """The ``meta`` of a video store: how every row was made, so that a resumed run can be
    checked against it and ``vlr eval`` against a benchmark's protocol.

    ``{"encoder": encoder, "media": "video", "frames", "sampler", "seed"`` (``rand`` only,
    else ``None``)``, "backend", "transform": {"size", "resize": "center_crop", "mean", "std"}}``.
    """
    size, mean, std = _tower_geometry(tower, f"video tower {encoder!r}")
    return {"encoder": encoder, "media": "video", "frames": frames, "sampler": sampler,
            "seed": seed if sampler == "rand" else None, "backend": backend,
            "transform": {"size": size, "resize": "center_crop", "mean": list(mean), "std": list(std)}}


def failures_path_of(out_dir: str | os.PathLike[str]) -> Path:
    """Where :func:`precompute_video_embeddings` lists the videos it could not decode:
    ``STORE.failures.jsonl`` beside the store (``stores/msrvtt`` -> ``stores/msrvtt.failures.jsonl``)."""
    out = _named(out_dir)
    return out.with_name(f"{out.name}.failures.jsonl")


def _video_seed(seed: int, video_id: str) -> int:
    """Each video's own seed for ``rand``: the same for a video whatever the order, the batch or
    the worker it comes in, different between videos."""
    digest = hashlib.sha256(f"{seed}\0{video_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class _Clips(torch.utils.data.Dataset):
    """Item i: ``(i, frames (T, 3, S, S), None)``, or ``(i, None, failure record)`` for a video
    that cannot be decoded; runs in the DataLoader's workers."""

    def __init__(self, items: Sequence[VideoItem], frames: int, sampler: str, seed: int, backend: str,
                 transform: Any) -> None:
        self.items, self.frames, self.sampler = list(items), frames, sampler
        self.seed, self.backend, self.transform = seed, backend, transform

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor | None, dict[str, Any] | None]:
        item = self.items[index]
        seed = _video_seed(self.seed, item.id) if self.sampler == "rand" else None
        try:
            raw = sample_frames(item.path, self.frames, self.sampler, seed=seed, window=item.window,
                                backend=self.backend)
        except VideoDecodeError as e:
            return index, None, {"id": item.id, "path": str(item.path), "backend": e.backend, "reason": e.reason,
                                 "error": str(e)}
        except ValueError as e:  # a clip's window that the video does not reach
            return index, None, {"id": item.id, "path": str(item.path), "backend": self.backend, "reason": str(e),
                                 "error": f"{item.path}: {e}"}
        return index, self.transform(raw), None


def _as_list(batch: list[Any]) -> list[Any]:
    return batch


def _checked_embeddings(out: Any, ids: Sequence[str], dim: int | None, name: str) -> torch.Tensor:
    n = len(ids)
    try:
        emb = torch.as_tensor(out)
    except (TypeError, ValueError, RuntimeError) as e:
        raise VideoEncoderError(f"video tower {name} returned a {_type_name(out)}, expected an ({n}, D) tensor "
                                f"({e})") from None
    if emb.ndim != 2 or emb.shape[0] != n or (dim is not None and emb.shape[1] != dim):
        raise VideoEncoderError(f"video tower {name} returned shape {tuple(emb.shape)} for {n} videos, expected "
                                f"({n}, {dim if dim is not None else 'D'})")
    emb = emb.detach().float().cpu()
    finite = torch.isfinite(emb).all(dim=1)
    if not bool(finite.all()):
        raise VideoEncoderError(f"video tower {name} gave video {ids[int((~finite).nonzero()[0])]!r} an embedding "
                                "that is not finite (NaN or inf)")
    return emb


def _write_failures(path: Path, failures: list[dict[str, Any]]) -> None:
    from vlr_plugins._io import atomic_write_text

    atomic_write_text(path, "".join(json.dumps(f, ensure_ascii=False) + "\n" for f in failures))


def precompute_video_embeddings(
    encoder: Any,
    videos: Sequence[VideoItem | tuple[str, str | os.PathLike[str]]],
    out_dir: str | os.PathLike[str],
    *,
    frames: int = 16,
    sampler: str = "middle",
    seed: int = 0,
    backend: str = "pyav",
    batch_size: int = 16,
    num_workers: int = 4,
    dtype: torch.dtype = torch.float32,
    resume: bool = False,
    overwrite: bool = False,
    failures: str | os.PathLike[str] | None = None,
    meta: dict[str, Any] | None = None,
    progress: bool = True,
    flush_rows: int = 256,
    flush_seconds: float = 30.0,
) -> tuple[EmbeddingStore, int]:
    """Encode ``videos`` once with a video tower and write their embeddings to an
    :class:`EmbeddingStore`; returns the store and the number of videos that failed.

    DataLoader workers decode ``frames`` frames of each video (``sampler``, see
    :func:`~vlr_plugins.data.video.frame_indices`; ``rand`` draws each video's frames from its
    own seed, made from ``seed`` and its id) and transform them for evaluation
    (:func:`~vlr_plugins.data.video.video_transform` at the tower's ``image_size``, ``image_mean``
    and ``image_std``); the calling process batches them through ``encoder.encode_video``
    (frames (B, T, 3, S, S) -> (B, D)) under ``torch.inference_mode()``, on the device of the
    tower's parameters.

    The store is written by a :class:`~vlr_plugins.data.ResumableEmbeddingStoreWriter`: rows
    become durable every ``flush_rows`` rows or ``flush_seconds`` seconds, and with
    ``resume=True`` the ids already there (a killed run's, or a finished store's) are skipped,
    so a rerun finishes the store. ``overwrite=True`` starts over. Earlier rows written with
    other settings (``meta``: encoder, frames, sampler, seed, backend, transform) are refused
    by name (:func:`~vlr_plugins.data.check_resumable_target`).

    A video that cannot be decoded (missing, empty, truncated, not a video) is skipped and
    listed, one JSON object per line ``{"id", "path", "backend", "reason", "error"}``, in
    ``failures`` (default :func:`failures_path_of` ``out_dir``), written atomically at the
    end and when the run is interrupted; a finished run without failures removes an earlier
    failures file. When no video at all could be encoded, nothing is written but the
    failures file, and a :class:`DataFormatError` naming it is raised.

    Args:
        encoder: a :class:`~vlr_plugins.vision.VideoTower`, e.g. from :func:`load_video_encoder`.
        videos: :class:`VideoItem` (or ``(id, path)`` pairs), e.g. from :func:`list_videos`.
        out_dir: the store to write.
        frames, sampler, seed, backend: how frames are picked and decoded (:data:`VIDEO_SAMPLERS`,
            :data:`~vlr_plugins.data.video.VIDEO_BACKENDS`).
        batch_size: videos per ``encode_video`` call.
        num_workers: DataLoader worker processes decoding videos (0: in this process).
        dtype: storage dtype of the store (float32 or float16).
        meta: entries added to (or replacing) :func:`video_store_meta`'s; ``encoder`` names the
            encoder (default: its class).
        progress: show a tqdm bar.

    Example::

        >>> tower = load_video_encoder("open_clip:ViT-B-16:openai", device="cuda")  # doctest: +SKIP
        >>> store, failed = precompute_video_embeddings(tower, list_videos("msrvtt/videos"),  # doctest: +SKIP
        ...                                             "stores/msrvtt", frames=12, resume=True)
    """
    from tqdm.auto import tqdm

    items = [v if isinstance(v, VideoItem) else VideoItem(v[0], Path(v[1])) for v in videos]
    first: dict[str, Path] = {}
    for item in items:
        if not isinstance(item.id, str):
            raise TypeError(f"video ids must be strings, found {_type_name(item.id)} for {item.path}")
        if item.id in first:
            raise ValueError(f"duplicate video id {item.id!r}: {first[item.id]} and {item.path}")
        first[item.id] = item.path
    if isinstance(frames, bool) or not isinstance(frames, int) or frames < 1:
        raise ValueError(f"frames must be a positive integer, found {frames!r}")
    if sampler not in VIDEO_SAMPLERS:
        raise ValueError(f"sampler must be one of {VIDEO_SAMPLERS}, found {sampler!r}")
    if backend not in VIDEO_BACKENDS:
        raise ValueError(f"backend must be one of {VIDEO_BACKENDS}, found {backend!r}")
    if batch_size < 1 or num_workers < 0:
        raise ValueError(f"batch_size must be positive and num_workers >= 0, found {batch_size}, {num_workers}")

    name = f"{type(encoder).__module__}:{type(encoder).__qualname__}"
    store_meta = {**video_store_meta(encoder, name, frames=frames, sampler=sampler, seed=seed, backend=backend),
                  **(meta or {})}
    name = str(store_meta["encoder"])
    size, mean, std = _tower_geometry(encoder, f"video tower {name!r}")
    dim = _tower_dim(encoder)
    earlier = check_resumable_target(out_dir, resume=resume, overwrite=overwrite, dim=dim, dtype=dtype,
                                     meta=store_meta)
    done = set(earlier.ids) if earlier is not None else set()
    todo = [item for item in items if item.id not in done]
    failures_path = Path(failures) if failures is not None else failures_path_of(out_dir)
    if earlier is not None and not todo and not earlier.unfinished and not work_dir_of(out_dir).exists():
        failures_path.unlink(missing_ok=True)
        return EmbeddingStore(out_dir), 0  # nothing to add

    def writer_for(width: int) -> ResumableEmbeddingStoreWriter:
        return ResumableEmbeddingStoreWriter(out_dir, width, dtype=dtype, meta=store_meta, overwrite=overwrite,
                                             resume=resume, flush_rows=flush_rows, flush_seconds=flush_seconds)

    transform = video_transform(False, size, mean, std)
    loader = torch.utils.data.DataLoader(_Clips(todo, frames, sampler, seed, backend, transform),
                                         batch_size=batch_size, num_workers=num_workers, collate_fn=_as_list)
    device = _tower_device(encoder)
    writer: ResumableEmbeddingStoreWriter | None = None
    failed: list[dict[str, Any]] = []
    try:
        bar = tqdm(total=len(items), initial=len(items) - len(todo), unit="video", desc="encoding videos",
                   disable=not progress)
        with bar:
            for batch in loader:
                failed.extend(failure for _, _, failure in batch if failure is not None)
                good = [(index, clip) for index, clip, failure in batch if failure is None]
                if good:
                    ids = [todo[index].id for index, _ in good]
                    clips = torch.stack([clip for _, clip in good]).to(device)
                    with torch.inference_mode():
                        out = encoder.encode_video(clips)
                    emb = _checked_embeddings(out, ids, writer.dim if writer is not None else dim, name)
                    if writer is None:
                        writer = writer_for(int(emb.shape[1]))
                    writer.add(ids, emb)
                bar.update(len(batch))
                if failed:
                    bar.set_postfix(failed=len(failed))
        if writer is None and earlier is not None:
            writer = writer_for(earlier.dim)  # every new video failed: finish the store with the rows there
        if writer is not None:
            writer.close()
    except BaseException:
        if writer is not None:
            writer.interrupt()  # keep the rows computed so far for a resumed run
        if failed:
            _write_failures(failures_path, failed)
        raise
    if failed:
        _write_failures(failures_path, failed)
    else:
        failures_path.unlink(missing_ok=True)
    if writer is None:
        raise DataFormatError(failures_path, f"lists all {len(failed)} videos: none could be decoded (each line "
                                             "gives the decoder's reason); no store was written")
    return EmbeddingStore(out_dir), len(failed)
