"""The video towers ``vlr precompute --encoder`` builds: an open_clip model, a tower config
file, a trained checkpoint, or a Python object imported from the current folder (the spec
itself is read by :func:`vlr_plugins.specs.load_video_encoder`, which calls these)."""

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

from vlr_plugins._imports import import_attr
from vlr_plugins.data._text_files import read_utf8
from vlr_plugins.errors import MissingFileError, VideoEncoderError, _type_name, loading_pretrained

__all__ = ["configured_tower", "imported_tower", "open_clip_tower", "tower_error", "tower_geometry",
           "trained_tower"]

_TOWER_TYPES = ("FramePooledVideoEncoder", "SpaceTimeViT")
_SHOWN = 5  # pretrained tags named in a message


def tower_error(what: str, problem: str) -> VideoEncoderError:
    """The error of a tower spec: ``what`` (option and spec), then the problem."""
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


def open_clip_tower(model_name: str, pretrained: str | None, own_scheme: bool, *, what: str, setting: str) -> Any:
    """open_clip's ``model_name`` image tower (``pretrained``: a checkpoint file or a tag), frame-pooled;
    ``own_scheme``: ``model_name`` is open_clip's ``hf-hub:`` / ``local-dir:`` name, which carries its
    config and weights (``pretrained`` then a checkpoint file whose weights replace them)."""
    from vlr_plugins.vision import FramePooledVideoEncoder

    builtin = not own_scheme
    try:
        import open_clip
    except ImportError as e:
        raise tower_error(what, f"needs open_clip (pip install open_clip_torch): {e}") from None
    if own_scheme:
        from vlr_plugins.integrations.open_clip.text_model import check_own_scheme, create_own_scheme_model

        check_own_scheme(model_name, pretrained, setting)
        shown = f"{model_name}:{pretrained}" if pretrained else model_name
        with loading_pretrained(shown, setting), _quiet_root_log():
            try:
                model = create_own_scheme_model(model_name, pretrained)
            except (RuntimeError, ValueError, KeyError) as e:
                _raise_download_error(e)
                raise tower_error(what, f"cannot build it: {type(e).__name__}: {' '.join(str(e).split())[:300]}") \
                    from None
        return FramePooledVideoEncoder(tower=model)
    if builtin and model_name.replace("/", "-") not in open_clip.list_models():
        raise tower_error(what, f"open_clip has no model {model_name!r} "
                                 "(python -c 'import open_clip; print(open_clip.list_models())' lists them)")
    if pretrained and not os.path.isfile(pretrained) \
            and pretrained not in open_clip.list_pretrained_tags_by_model(model_name):
        tags = open_clip.list_pretrained_tags_by_model(model_name)
        tags = ", ".join(tags[:_SHOWN]) + (f", ... ({len(tags)} in all)" if len(tags) > _SHOWN else "") or "none"
        raise tower_error(what, f"{pretrained!r} is neither a checkpoint file nor a pretrained tag of "
                                 f"{model_name} (its tags: {tags})")
    with loading_pretrained(f"{model_name}:{pretrained}" if pretrained else model_name, setting), _quiet_root_log():
        try:
            model = open_clip.create_model(model_name, pretrained=pretrained)
        except (RuntimeError, ValueError, KeyError, pickle.UnpicklingError) as e:
            _raise_download_error(e)
            raise tower_error(what, f"cannot build it: {type(e).__name__}: {e}") from e
    return FramePooledVideoEncoder(tower=model)


def configured_tower(path: Path, what: str, setting: str) -> Any:
    import yaml

    from vlr_plugins.registry import MODELS
    from vlr_plugins.vision import load_video_checkpoint

    if not path.is_file():
        raise MissingFileError(f"{setting}: no tower config at {path}" + (" (it is a folder)" if path.is_dir() else ""))
    try:
        cfg = yaml.safe_load(read_utf8(path))
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or " ".join(str(e).split())
        raise tower_error(what, f"not valid YAML or JSON: {problem}") from None
    if not isinstance(cfg, dict):
        raise tower_error(what, f"expected a mapping with 'type' ({' or '.join(_TOWER_TYPES)}) and its arguments, "
                                 f"found {_type_name(cfg)}")
    cfg = dict(cfg)
    kind = cfg.pop("type", None)
    if kind not in _TOWER_TYPES:
        raise tower_error(f"{what}, field 'type'", f"expected one of {', '.join(_TOWER_TYPES)}, found {kind!r}")
    checkpoint = cfg.pop("checkpoint", None)
    layout = cfg.pop("checkpoint_layout", "native" if kind == "FramePooledVideoEncoder" else "auto")
    if checkpoint is not None and (not isinstance(checkpoint, str) or not checkpoint):
        raise tower_error(f"{what}, field 'checkpoint'", f"expected a file path, found {json.dumps(checkpoint)}")
    with loading_pretrained(str(path), setting), _quiet_root_log(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # a tower without a checkpoint starts the same in every run, so reruns agree
        try:
            model = MODELS.get(kind)(**cfg)
        except (TypeError, ValueError, KeyError, RuntimeError) as e:
            _raise_download_error(e)
            message = e.args[0] if isinstance(e, KeyError) and e.args else e
            raise tower_error(what, f"cannot build a {kind} from it: {message}") from e
    if checkpoint is not None:
        file = Path(checkpoint) if os.path.isabs(checkpoint) else path.parent / checkpoint
        if not file.exists():
            raise MissingFileError(f"{what}, field 'checkpoint': no checkpoint at {file}")
        try:
            load_video_checkpoint(model, file, layout=layout)
        except (ValueError, KeyError, TypeError, FileNotFoundError) as e:
            message = str(e.args[0] if isinstance(e, KeyError) and e.args else e)
            raise tower_error(f"{what}, field 'checkpoint'",
                               message if str(file) in message else f"{file}: {message}") from e
    return model


def trained_tower(checkpoint: str, what: str) -> Any:
    """The video tower of a ``vlr train`` checkpoint (``meta['vlr_video_encoder']`` + the
    ``video_encoder.`` weights)."""
    from vlr_plugins.checkpoint_meta import load_weights_only
    from vlr_plugins.registry import MODELS

    if not checkpoint:
        raise tower_error(what, "expected vlr:CHECKPOINT, the .pth file of a vlr train run that trained a video tower")
    if not os.path.isfile(checkpoint):
        raise MissingFileError(f"{what}: no checkpoint at {checkpoint}")
    ckpt = load_weights_only(checkpoint)
    meta = ckpt.get("meta") if isinstance(ckpt, dict) else None
    cfg = meta.get("vlr_video_encoder") if isinstance(meta, dict) else None
    if not isinstance(cfg, dict) or cfg.get("type") not in _TOWER_TYPES:
        raise tower_error(what, f"{checkpoint} records no video tower (meta['vlr_video_encoder']): only a vlr train "
                                 "run of a video-text recipe (data.schema: mvc) trains one")
    state = ckpt.get("state_dict", {})
    prefix = "video_encoder."
    weights = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    args = {k: v for k, v in cfg.items() if k != "type"}
    with _quiet_root_log():
        model = MODELS.get(cfg["type"])(**args)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise tower_error(what, f"{checkpoint}: its {prefix}* weights do not fit the recorded {cfg['type']} "
                                 f"(missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})")
    return model


def imported_tower(module_name: str, attr: str, what: str) -> Any:
    """``attr`` of ``module_name`` (the current folder first): a tower, or a class or function called
    without arguments that returns one."""
    obj = import_attr(module_name, attr, lambda problem, _: tower_error(what, problem))
    if inspect.isclass(obj) or (callable(obj) and not hasattr(obj, "encode_video")):
        try:
            inspect.signature(obj).bind()
        except TypeError as e:
            raise tower_error(what, f"{attr} is called without arguments to make the tower, and it needs "
                                     f"some ({e})") from None
        except ValueError:  # a builtin without a signature: call it and see
            pass
        obj = obj()
    return obj


def tower_geometry(tower: Any, what: str) -> tuple[int, tuple[float, ...], tuple[float, ...]]:
    """The tower's square input side and normalisation, or one error saying what it lacks."""
    from vlr_plugins.data.video import normalization_of

    needed = ("encode_video", "image_mean", "image_std", "image_size")
    missing = [a for a in needed if not hasattr(tower, a)]
    if missing or not callable(tower.encode_video):
        lacks = ", ".join(missing) or "a callable encode_video"
        raise tower_error(what, f"a {type(tower).__name__} is not a video tower (it lacks {lacks}); expected "
                                 "encode_video(frames (B, T, 3, H, W)) -> (B, D) and the attributes image_mean, "
                                 "image_std, image_size (vlr_plugins.vision.VideoTower)")
    try:
        mean, std = normalization_of({"mean": tower.image_mean, "std": tower.image_std})
    except (ValueError, TypeError) as e:
        raise tower_error(what, f"its image_mean / image_std: {e}") from None
    size = tower.image_size
    if not isinstance(size, int):
        try:
            h, w = (int(s) for s in size)
        except (TypeError, ValueError):
            h, w = -1, -2
        if h != w:
            raise tower_error(what, f"its image_size must be one side or (side, side): frames are cropped square, "
                                     f"found {size!r}")
        size = h
    if isinstance(size, bool) or size < 1:
        raise tower_error(what, f"its image_size must be a positive integer, found {size!r}")
    return size, mean, std


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
