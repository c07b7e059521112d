"""The text side of an open_clip or Long-CLIP checkpoint, as ``vlr eval --model
open_clip:MODEL:CHECKPOINT_OR_TAG`` scores it.

Items (images, or videos frame-pooled by :class:`~vlr_plugins.vision.FramePooledVideoEncoder`
over the same model's visual tower) come from stores written beforehand; only texts are
encoded here, with open_clip's own tokenizer at the model's context length (77 for CLIP,
248 for the ``-ctx248`` long-context configs of
:mod:`vlr_plugins.integrations.open_clip.long_context`).
"""

from __future__ import annotations

import difflib
import os
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from vlr_plugins.errors import (
    ConfigError,
    DataFormatError,
    MissingFileError,
    UsageError,
    loading_pretrained,
    refusing_pickled_weights,
)

__all__ = ["OpenCLIPTextModel", "check_checkpoint_file", "check_local_dir", "check_own_scheme",
           "create_own_scheme_model", "load_open_clip_text_model"]

_WEIGHTS = ("*.safetensors", "*.bin", "*.pth")  # what open_clip looks for in a local-dir folder


class OpenCLIPTextModel:
    """An open_clip ``CLIP`` / ``CustomTextCLIP`` as a text model (the protocol of ``vlr_plugins.eval.models``).

    ``encode_text(texts, max_tokens=None) -> (N, D)``: ``tokenizer(texts)`` at the model's
    context length, or cut to ``max_tokens`` tokens (start and end tokens included) and
    padded back to the context with the tokenizer's pad id, which open_clip's pooling (the
    end token, or the pad mask) ignores. ``max_positions`` is the context length,
    ``embed_dim`` the width of its text embeddings.

    Example::

        model, _, _ = open_clip.create_model_and_transforms("ViT-B-32", pretrained="openai")
        text = OpenCLIPTextModel(model, open_clip.get_tokenizer("ViT-B-32"), name="ViT-B-32:openai")
        text.encode_text(["a dog runs on the beach"]).shape  # (1, 512)
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, *, name: str = "open_clip") -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.max_positions = int(getattr(model, "context_length", None) or tokenizer.context_length)
        self.embed_dim = int(self.encode_text(["a"]).shape[1])

    def encode_text(self, texts: Sequence[str], max_tokens: int | None = None) -> torch.Tensor:
        """texts (N,) -> (N, D), not normalised."""
        if max_tokens is not None and max_tokens > self.max_positions:
            raise ValueError(f"{self.name}: {max_tokens} tokens exceed its {self.max_positions} positions")
        tokens = self.tokenizer(list(texts), context_length=max_tokens or self.max_positions)
        if tokens.shape[1] < self.max_positions:
            pad = getattr(getattr(self.tokenizer, "tokenizer", None), "pad_token_id", None) or 0
            tokens = torch.nn.functional.pad(tokens, (0, self.max_positions - tokens.shape[1]), value=pad)
        device = next(self.model.parameters()).device
        with torch.no_grad():
            return self.model.encode_text(tokens.to(device)).float()


def _checked_file(path: str) -> None:
    """A checkpoint file torch (or safetensors) reads without running code, else one error naming it."""
    if path.endswith(".safetensors"):
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(path, framework="pt"):
                pass
        except (SafetensorError, OSError) as e:
            raise DataFormatError(path, f"not a safetensors file: {' '.join(str(e).split())}") from None
        return
    from vlr_plugins.checkpoint_meta import load_weights_only

    load_weights_only(path, mmap=True)


def _architecture(name: str, setting: str) -> tuple[str, str | None]:
    """``(name, base)``: a known open_clip config, or ``<base>-ctx<N>`` of one (``base`` set)."""
    import open_clip

    from vlr_plugins.integrations.open_clip.long_context import (
        parse_long_context_name,
        register_long_context_configs,
    )

    register_long_context_configs()
    parsed = parse_long_context_name(name)
    base = parsed[0] if parsed else None
    if open_clip.get_model_config(name) is not None or (base and open_clip.get_model_config(base) is not None):
        return name, base
    close = difflib.get_close_matches(name, open_clip.list_models(), n=3)
    raise UsageError(setting, f"open_clip has no model {name!r}" + (f"; did you mean {', '.join(close)}?" if close
                              else "; see open_clip.list_models(), or a '<model>-ctx<N>' long-context name"))


def _weights(name: str, base: str | None, pretrained: str, setting: str) -> None:
    """Check ``pretrained`` (a tag of the model, or a file) and download a tag's weights."""
    import open_clip
    from open_clip.pretrained import download_pretrained, get_pretrained_cfg

    arch = name if open_clip.list_pretrained_tags_by_model(name) else (base or name)
    tags = open_clip.list_pretrained_tags_by_model(arch)
    if pretrained in tags:
        with loading_pretrained(f"{arch}:{pretrained}", setting):
            download_pretrained(get_pretrained_cfg(arch, pretrained))
        return
    if os.path.isdir(pretrained):
        raise UsageError(setting, f"{pretrained} is a folder: give a checkpoint file, a pretrained tag, or "
                                  f"open_clip:local-dir:{pretrained} for a folder open_clip saved")
    if os.path.isfile(pretrained):
        _checked_file(pretrained)
        return
    if os.sep in pretrained or "/" in pretrained or os.path.splitext(pretrained)[1]:
        raise MissingFileError(f"{setting}: no checkpoint at {pretrained}")
    raise UsageError(setting, f"{pretrained!r} is neither a checkpoint file nor a pretrained tag of {arch} "
                              f"(its tags: {', '.join(tags) or 'none'})")


def check_checkpoint_file(checkpoint: str, setting: str) -> None:
    """Raise unless ``checkpoint`` is a file torch reads with ``weights_only=True`` (or a
    safetensors file): a folder, a missing file, a pickle of Python objects are one error each."""
    if os.path.isdir(checkpoint):
        raise UsageError(setting, f"{checkpoint} is a folder: give a checkpoint file (open_clip_train writes "
                                  "logs/<name>/checkpoints/epoch_N.pt)")
    if not os.path.isfile(checkpoint):
        raise MissingFileError(f"{setting}: no checkpoint at {checkpoint}")
    _checked_file(checkpoint)


def check_own_scheme(model_name: str, checkpoint: str | None, setting: str) -> None:
    """``hf-hub:ORG/REPO`` / ``local-dir:FOLDER`` (``model_name``) with ``checkpoint`` (or None)
    checked before anything is built: without a checkpoint, the model's config and weights
    (downloaded, or read from the folder); with one, the config alone and the checkpoint file."""
    from open_clip.pretrained import download_pretrained_from_hf

    if model_name.startswith("hf-hub:"):
        repo = model_name[len("hf-hub:"):]
        with loading_pretrained(repo, setting):
            download_pretrained_from_hf(repo, filename="open_clip_config.json")
            if checkpoint is None:
                download_pretrained_from_hf(repo)
    else:
        check_local_dir(model_name, setting, weights=checkpoint is None)
    if checkpoint is not None:
        check_checkpoint_file(checkpoint, setting)


def create_own_scheme_model(model_name: str, checkpoint: str | None, *,
                            device: str | torch.device = "cpu") -> torch.nn.Module:
    """open_clip's ``hf-hub:`` / ``local-dir:`` model ``model_name``: its own weights, or (open_clip
    ignoring ``pretrained`` for these names) ``checkpoint``'s, loaded as open_clip loads a
    ``pretrained`` file (``open_clip.load_checkpoint``: ``weights_only=True``, an open_clip_train
    checkpoint's ``state_dict`` taken and its ``module.`` prefixes dropped, a strict load).
    Check the inputs first with :func:`check_own_scheme`."""
    import logging

    import open_clip

    def _not_random(record: logging.LogRecord) -> bool:  # open_clip's "initialized randomly": the checkpoint follows
        return checkpoint is None or not record.getMessage().startswith("No pretrained weights loaded")

    root = logging.getLogger()
    root.addFilter(_not_random)
    try:
        model = open_clip.create_model(model_name, load_weights=checkpoint is None, device=device)
    finally:
        root.removeFilter(_not_random)
    if checkpoint is not None:
        open_clip.load_checkpoint(model, checkpoint, weights_only=True, device=device)
    return model


def check_local_dir(model_name: str, setting: str, *, weights: bool = True) -> None:
    """Raise unless ``local-dir:FOLDER`` (``model_name``) is an open_clip model folder whose
    weights load without running code: ``open_clip_config.json`` and a weights file there, each
    ``.bin`` / ``.pth`` read with ``torch.load(weights_only=True)`` (memory-mapped),
    each ``.safetensors`` by its header (``weights=False``: the config alone, for a folder whose
    weights a checkpoint replaces). One error names ``setting`` and the file; nothing is built."""
    import zipfile

    folder = Path(model_name[len("local-dir:"):])
    if not (folder / "open_clip_config.json").is_file():
        what = "no open_clip_config.json in it" if folder.is_dir() else "not a folder"
        raise MissingFileError(f"{setting}: no open_clip model at {folder} ({what}; open_clip's "
                               "save_pretrained or an hf-hub download writes one)")
    if not weights:
        return
    files = sorted({p for pattern in _WEIGHTS for p in folder.glob(pattern)})
    if not files:
        raise MissingFileError(f"{setting}: the open_clip model at {folder} holds no weights "
                               f"({', '.join(_WEIGHTS)}); it would score a random model")
    for path in files:
        if path.suffix == ".safetensors":
            _checked_file(str(path))
            continue
        with refusing_pickled_weights(model_name, setting):
            try:
                torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
            except pickle.UnpicklingError:
                raise
            except Exception as e:  # noqa: BLE001 -- the file is the only input: whatever torch.load trips on is in it
                raise DataFormatError(str(path), f"{setting}: not a PyTorch weights file "
                                                 f"({type(e).__name__}: {' '.join(str(e).split())[:200]})") from None


def load_open_clip_text_model(model_name: str, pretrained: str | None, own_scheme: bool, *, spec: str,
                              setting: str = "--model", device: str | torch.device = "cpu") -> OpenCLIPTextModel:
    """``open_clip:MODEL:CHECKPOINT_OR_TAG`` (``spec``; :func:`vlr_plugins.specs.load_text_model`
    reads it into ``model_name``, ``pretrained`` and ``own_scheme``) -> :class:`OpenCLIPTextModel`.

    ``MODEL`` is an open_clip config name (``ViT-B-32``), a long-context name
    ``<base>-ctx<N>`` (``ViT-L-14-ctx248``: a 77-token source is stretched the Long-CLIP way
    by :func:`~vlr_plugins.integrations.open_clip.create_long_context_model_and_transforms`,
    a 248-token Long-CLIP checkpoint loaded as is), ``hf-hub:org/name`` or
    ``local-dir:/folder`` (these two carry their config and weights; a ``CHECKPOINT`` after
    them, ``open_clip:local-dir:tiny-clip:logs/tiny/checkpoints/epoch_1.pt``, replaces the
    weights: :func:`create_own_scheme_model`). Long-CLIP's
    own ``longclip-B.pt`` / ``-L.pt`` (two positional tables) load as
    ``ViT-B-16-quickgelu-ctx248`` / ``ViT-L-14-quickgelu-ctx248``, their texts embedded as
    Long-CLIP's ``encode_text`` embeds them.
    ``CHECKPOINT_OR_TAG`` is a pretrained tag of the model (``openai``) or a checkpoint
    file, read with ``weights_only=True`` (or as safetensors).

    Checked before the model is built: the name, the tag or file, the folder; a tag or
    ``hf-hub:`` model that cannot be downloaded (offline, not cached) is a
    :class:`~vlr_plugins.errors.ModelLoadError`; a checkpoint of another architecture a
    :class:`~vlr_plugins.errors.ConfigError` naming both.
    """
    import open_clip

    from vlr_plugins.integrations.open_clip.long_clip_checkpoint import long_clip_model_name, refuse_under_short_name
    from vlr_plugins.integrations.open_clip.long_context import (
        create_long_context_model_and_transforms,
    )

    shown = f"{model_name}:{pretrained}" if pretrained else model_name  # as the spec gives it
    if own_scheme:
        base = None
        if not model_name.split(":", 1)[1]:
            raise UsageError(setting, f"{spec!r} needs a Hub id or a folder after {model_name!r}")
        check_own_scheme(model_name, pretrained, setting)
    else:
        if not model_name or not pretrained:
            raise UsageError(setting, f"expected open_clip:MODEL:CHECKPOINT_OR_TAG (e.g. open_clip:ViT-B-32:openai, "
                                      f"open_clip:ViT-B-16-quickgelu-ctx248:epoch_6.pt), found {spec!r}")
        model_name, base = _architecture(model_name, setting)
        _weights(model_name, base, pretrained, setting)
    try:
        with loading_pretrained(shown, setting):
            if own_scheme:
                model = create_own_scheme_model(model_name, pretrained, device=device)
            elif base is not None:
                model = create_long_context_model_and_transforms(model_name, pretrained, train_new_only=False,
                                                                 device=device)[0]
            else:
                model = open_clip.create_model_and_transforms(model_name, pretrained=pretrained, device=device)[0]
    except RuntimeError as e:
        if "Error(s) in loading state_dict" not in str(e):
            raise
        if not own_scheme:
            refuse_under_short_name(e, pretrained, setting=setting,
                                    give=f"open_clip:{long_clip_model_name(model_name)}:{pretrained}")
        gist = " ".join(str(e).split())[:300]
        raise ConfigError(f"{setting}: {pretrained} does not hold weights of open_clip model {model_name}: "
                          f"{gist}") from None
    tokenizer_name = base if base is not None and open_clip.get_model_config(model_name) is None else model_name
    tokenizer = open_clip.get_tokenizer(tokenizer_name, context_length=model.context_length)
    return OpenCLIPTextModel(model, tokenizer, name=spec)
