"""Video towers named by a string, as ``vlr precompute --encoder`` names them: an open_clip
model, a tower config file, a trained checkpoint, an MLLM embedder (``mllm:``), or a Python
object imported from the current folder."""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from vlr_plugins.data._text_files import read_utf8
from vlr_plugins.data.precompute import _current_folder_importable
from vlr_plugins.errors import MissingFileError, VideoEncoderError, _type_name, loading_pretrained

__all__ = ["load_video_encoder"]

_TOWER_TYPES = ("FramePooledVideoEncoder", "SpaceTimeViT")
_CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
#: ``vlr:CHECKPOINT``: the video tower a ``vlr train`` run trained
_TRAINED_PREFIX = "vlr:"
_SHOWN = 5  # pretrained tags named in a message


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


def _raise_download_error(error: Exception) -> None:
    """open_clip wraps a failed download (an ``OSError``) in a ``RuntimeError``: raise the
    download's own error, which ``loading_pretrained`` reports as a ModelLoadError."""
    cause = error.__cause__ or error.__context__
    if isinstance(cause, OSError):
        raise cause from error


def _open_clip_encoder(rest: str, what: str, setting: str) -> Any:
    from vlr_plugins.vision import FramePooledVideoEncoder

    if not rest:
        raise _tower_error(what, "needs a model name after 'open_clip:' (e.g. open_clip:ViT-B-16:openai)")
    builtin = not rest.startswith(("hf-hub:", "local-dir:"))  # open_clip's own schemes carry their weights
    model_name, _, tag = rest.partition(":") if builtin else (rest, "", "")
    pretrained = tag or None
    try:
        import open_clip
    except ImportError as e:
        raise _tower_error(what, f"needs open_clip (pip install open_clip_torch): {e}") from None
    if builtin and model_name.replace("/", "-") not in open_clip.list_models():
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
            _raise_download_error(e)
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
    with loading_pretrained(str(path), setting), _quiet_root_log(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # a tower without a checkpoint starts the same in every run, so reruns agree
        try:
            model = MODELS.get(kind)(**cfg)
        except (TypeError, ValueError, KeyError, RuntimeError) as e:
            _raise_download_error(e)
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


def _trained_encoder(checkpoint: str, what: str) -> Any:
    """The video tower of a ``vlr train`` checkpoint (``meta['vlr_video_encoder']`` + the
    ``video_encoder.`` weights)."""
    from vlr_plugins.checkpoint_meta import load_weights_only
    from vlr_plugins.registry import MODELS

    if not checkpoint:
        raise _tower_error(what, "expected vlr:CHECKPOINT, the .pth file of a vlr train run that trained a video tower")
    if not os.path.isfile(checkpoint):
        raise MissingFileError(f"{what}: no checkpoint at {checkpoint}")
    ckpt = load_weights_only(checkpoint)
    meta = ckpt.get("meta") if isinstance(ckpt, dict) else None
    cfg = meta.get("vlr_video_encoder") if isinstance(meta, dict) else None
    if not isinstance(cfg, dict) or cfg.get("type") not in _TOWER_TYPES:
        raise _tower_error(what, f"{checkpoint} records no video tower (meta['vlr_video_encoder']): only a vlr train "
                                 "run of a video-text recipe (data.schema: mvc) trains one")
    state = ckpt.get("state_dict", {})
    prefix = "video_encoder."
    weights = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    args = {k: v for k, v in cfg.items() if k != "type"}
    with _quiet_root_log():
        model = MODELS.get(cfg["type"])(**args)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise _tower_error(what, f"{checkpoint}: its {prefix}* weights do not fit the recorded {cfg['type']} "
                                 f"(missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})")
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
            raise _tower_error(what, f"{attr} is called without arguments to make the tower, and it needs "
                                     f"some ({e})") from None
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
        lacks = ", ".join(missing) or "a callable encode_video"
        raise _tower_error(what, f"a {type(tower).__name__} is not a video tower (it lacks {lacks}); expected "
                                 "encode_video(frames (B, T, 3, H, W)) -> (B, D) and the attributes image_mean, "
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


def load_video_encoder(spec: str, *, setting: str = "encoder spec", device: str | torch.device = "cpu",
                       dtype: str | torch.dtype | None = None) -> Any:
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
    - ``"vlr:CHECKPOINT"``: the video tower a ``vlr train`` run trained with its text encoder
      (an MVC recipe): rebuilt from the architecture the checkpoint records
      (``meta['vlr_video_encoder']``) and its ``video_encoder.`` weights; the file is read
      with ``torch.load(weights_only=True)``.
    - ``"mllm:FOLDER[:PROMPT]"``: the video side of a CaRe / E5-V
      :class:`~vlr_plugins.mllm.EOLEmbedder` (an MLLM folder or a ``vlr export`` of one, under
      the EOL prompt ``PROMPT``, default the export's own or ``care``;
      :func:`~vlr_plugins.mllm.model_spec.load_mllm_spec`), in ``dtype`` (``"auto"`` or None:
      the checkpoint's own; :mod:`vlr_plugins.mllm.model_dtype`). It sees the frames the
      caller samples (``vlr precompute --frames/--sampler``; CaReBench: 32, uniform), resized
      by its processor. ``dtype`` is refused for every other spec.
    - ``"module.sub:attr"``: imports ``module.sub`` (the current folder first, as ``python -m``
      does) and takes ``attr``: a tower itself, or a class or function called without
      arguments that returns one.

    The tower must offer ``encode_video(frames (B, T, 3, H, W)) -> (B, D)`` and ``image_mean``,
    ``image_std``, ``image_size`` (square). A ``torch.nn.Module`` is moved to ``device`` and put
    in eval mode. Every problem with the spec is one
    :class:`~vlr_plugins.errors.VideoEncoderError` (or a
    :class:`~vlr_plugins.errors.MissingFileError` for a file that is not there) whose message
    starts with ``setting`` (``vlr precompute`` passes ``"--encoder"``).

    Example::

        >>> enc = load_video_encoder("open_clip:ViT-B-16:openai", device="cuda")  # doctest: +SKIP
        >>> enc.encode_video(frames).shape  # frames (2, 16, 3, 224, 224)  # doctest: +SKIP
        torch.Size([2, 512])
    """
    what = f"{setting} {spec!r}"
    if dtype not in (None, "auto") and not spec.startswith("mllm:"):
        raise _tower_error(what, f"a model dtype ({dtype}) is chosen for mllm: specs only; this tower is "
                                 "loaded as it is stored")
    if spec.startswith("open_clip:"):
        tower = _open_clip_encoder(spec[len("open_clip:"):], what, setting)
    elif spec.startswith("mllm:"):
        from vlr_plugins.mllm.model_spec import load_mllm_spec

        tower = load_mllm_spec(spec, setting=setting, device=device, dtype=dtype)
    elif spec.startswith(_TRAINED_PREFIX):
        tower = _trained_encoder(spec[len(_TRAINED_PREFIX):], what)
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
