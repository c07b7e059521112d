"""Model specs: the strings that name a model on a command line, parsed here once.

Every command that loads a model (``vlr eval --model``, ``vlr precompute --encoder``,
``vlr export``, ...) hands its string to :func:`parse_model_spec` and one of the loaders
below, in the spirit of open_clip's ``factory.parse_model_name``: the scheme is read once
into a :class:`ModelSpec`, and each loader dispatches on it to the builder that area owns.

==============================  =====================  ===========================================
spec                            roles                  what it names
==============================  =====================  ===========================================
``blip:<hub name or folder>``   text, image            BLIP's text side / frozen image side
``open_clip:MODEL[:PRETRAINED]``  text, video          an open_clip model (``MODEL`` may be
                                                       open_clip's own ``hf-hub:ORG/REPO`` or
                                                       ``local-dir:FOLDER``, which carry weights,
                                                       or take a trained ``:CHECKPOINT`` after)
``mllm:FOLDER[:PROMPT]``        text, image, video     a CaRe / E5-V EOL embedder (an MLLM folder
                                                       or a ``vlr export``; PROMPT ``care``,
                                                       ``e5v``, or a prompt YAML)
``vlr:CHECKPOINT``              video                  the video tower a ``vlr train`` run trained
a ``.yaml`` / ``.yml`` / ``.json``  video              a tower config (FramePooledVideoEncoder,
                                                       SpaceTimeViT)
``module.sub:attr``             text, image, video     a Python object (the current folder first)
a path                          text                   a ``vlr train`` checkpoint (``.pth``)
==============================  =====================  ===========================================

The loaders: :func:`load_text_encoder` / :func:`load_checked_text_encoder` (checkpoints
and ``blip:``, scored through their tokenizer), :func:`load_text_model` (``open_clip:``,
``mllm:``, ``module:callable``), :func:`load_image_encoder`, :func:`load_video_encoder`.
Only ``mllm:`` models take a model dtype (:func:`takes_model_dtype`); every other model is
loaded as its own code loads it.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from vlr_plugins.errors import MissingFileError, UsageError, loading_pretrained

if TYPE_CHECKING:
    import torch

__all__ = ["MLLM_PREFIX", "ModelSpec", "Role", "check_model_dtype_option", "load_checked_text_encoder",
           "load_image_encoder", "load_mllm_spec", "load_text_encoder", "load_text_model", "load_text_tokenizer",
           "load_video_encoder", "mllm_model_folder", "model_dtype_record", "parse_model_spec",
           "refuse_tokenizer_options", "split_mllm_spec", "takes_model_dtype", "text_encoder_meta", "text_model_source"]

Role = Literal["text", "image", "video"]
MLLM_PREFIX = "mllm:"
_BLIP, _OPEN_CLIP, _TRAINED = "blip:", "open_clip:", "vlr:"
#: the schemes each role reads; any other string is a Python object (or, for text, a checkpoint)
_ROLE_SCHEMES: dict[str, tuple[str, ...]] = {"text": (_OPEN_CLIP, MLLM_PREFIX, _BLIP),
                                              "image": (MLLM_PREFIX, _BLIP),
                                              "video": (_OPEN_CLIP, MLLM_PREFIX, _TRAINED)}
#: open_clip's own model-name schemes: the model carries its weights, nothing follows
OPEN_CLIP_OWN_SCHEMES = ("hf-hub:", "local-dir:")
_TOWER_CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
_PYTHON_SPEC = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_MLLM_FORM = "mllm:FOLDER[:PROMPT] (a transformers MLLM folder or a vlr export; PROMPT e.g. care or e5v)"


@dataclass(frozen=True)
class ModelSpec:
    """A model spec as :func:`parse_model_spec` reads it.

    ``scheme`` is ``"blip"``, ``"open_clip"``, ``"mllm"``, ``"vlr"``, ``"tower_config"``,
    ``"python"`` or ``"checkpoint"``; ``target`` what follows the scheme (a Hub name or
    folder, an open_clip name, an MLLM folder, a file, ``module.sub:attr``); ``prompt`` the
    EOL prompt of an ``mllm:`` spec (None: the export's own, else ``care``).
    """

    text: str
    scheme: str
    target: str
    prompt: str | None = None

    @property
    def python_parts(self) -> tuple[str, str, str]:
        """``module.sub:attr`` -> ``("module.sub", ":", "attr")`` (empty parts when malformed)."""
        return self.target.partition(":")

    @property
    def open_clip_parts(self) -> tuple[str, str | None, bool]:
        """``open_clip:MODEL[:PRETRAINED]`` -> ``(MODEL, PRETRAINED or None, own_scheme)``:
        ``own_scheme`` for open_clip's ``hf-hub:ORG/REPO[:CHECKPOINT]`` /
        ``local-dir:FOLDER[:CHECKPOINT]`` names, which carry their config (and weights unless a
        checkpoint follows). A ``local-dir:`` folder that exists as written is taken whole (a
        path may hold a colon), else the text after the last colon is the checkpoint, as for
        ``mllm:FOLDER[:PROMPT]``; a Hub id holds no colon, so its first one starts the checkpoint."""
        if self.target.startswith("local-dir:"):
            folder, checkpoint = _mllm_parts(self.target[len("local-dir:"):])
            return f"local-dir:{folder}", checkpoint, True
        if self.target.startswith("hf-hub:"):
            repo, _, checkpoint = self.target[len("hf-hub:"):].partition(":")
            return f"hf-hub:{repo}", checkpoint or None, True
        model_name, _, pretrained = self.target.partition(":")
        return model_name, pretrained or None, False


def _mllm_parts(rest: str) -> tuple[str, str | None]:
    """``FOLDER[:PROMPT]`` (or ``FOLDER[:CHECKPOINT]`` after ``open_clip:local-dir:``): a folder
    that exists as written is taken whole (a path may hold a colon); otherwise the text after
    the last colon is the prompt."""
    if os.path.exists(rest) or ":" not in rest:
        return rest, None
    folder, _, prompt = rest.rpartition(":")
    return folder, prompt or None


def parse_model_spec(spec: str | os.PathLike[str], role: Role = "text") -> ModelSpec:
    """Read ``spec`` as a model of ``role`` (``"text"``, ``"image"`` or ``"video"``).

    Only the schemes ``role`` takes are schemes (module docstring): for an image encoder
    ``vlr:x`` is a Python object ``x`` of module ``vlr``. A text spec that is neither a
    scheme nor ``module.sub:attr`` (nor a path that exists) is a checkpoint path. Parsing
    never fails: each loader refuses what it cannot load, naming its option.
    """
    spec = os.fspath(spec)
    for prefix in _ROLE_SCHEMES[role]:
        if spec.startswith(prefix):
            rest = spec[len(prefix):]
            if prefix == MLLM_PREFIX:
                folder, prompt = _mllm_parts(rest)
                return ModelSpec(spec, "mllm", folder, prompt)
            return ModelSpec(spec, prefix[:-1], rest)
    if role == "video" and Path(spec).suffix.lower() in _TOWER_CONFIG_SUFFIXES:
        return ModelSpec(spec, "tower_config", spec)
    if role == "text" and (os.path.exists(spec) or not _PYTHON_SPEC.match(spec)):
        return ModelSpec(spec, "checkpoint", spec)
    return ModelSpec(spec, "python", spec)


def text_model_source(spec: str) -> str:
    """What ``vlr eval --model spec`` names: ``"open_clip"``, ``"mllm"``, ``"python"``
    (``module.sub:attr``, not a path that exists) or ``"checkpoint"`` (a ``vlr train``
    checkpoint or ``blip:<name>``, scored through its tokenizer)."""
    scheme = parse_model_spec(spec, "text").scheme
    return "checkpoint" if scheme == "blip" else scheme


def refuse_tokenizer_options(spec: str, given: dict[str, Any]) -> None:
    """A text model that tokenizes its texts itself (``open_clip:``, ``mllm:``, ``module:callable``)
    takes none of the options only a checkpoint's tokenizer reads: ``given`` maps each such
    option (``--tokenizer``, ``--truncation``) to its value; the first one set is refused."""
    for option, value in given.items():
        if value:
            raise UsageError(option, f"{spec} tokenizes its texts itself; {option} is for `vlr train` "
                                     "checkpoints and blip: models")


# --------------------------------------------------------------------------- the model dtype rule


def takes_model_dtype(spec: str) -> bool:
    """Whether a model dtype can be chosen for ``spec``: ``mllm:`` models only (CaRe, E5-V);
    every other model is loaded as its own code loads it."""
    return parse_model_spec(spec, "text").scheme == "mllm"


def _chosen(dtype: Any) -> bool:
    return dtype not in (None, "auto")


def check_model_dtype_option(dtype: str, spec: str, option: str) -> None:
    """``--model-dtype`` other than auto for a spec that takes none: refused, naming the
    option, before anything loads."""
    if _chosen(dtype) and not takes_model_dtype(spec):
        raise UsageError("--model-dtype", f"{dtype} is for mllm:FOLDER[:PROMPT] models (CaRe, E5-V); "
                                          f"{option} {spec!r} is loaded as its own code loads it")


def model_dtype_record(dtype_option: str, model: Any, spec: str, device: str) -> dict[str, str]:
    """``{"model_dtype": "bfloat16"}``: the dtype an ``mllm:`` model computes in, as a run
    records it beside the spec (a store's meta, results.json); ``{}`` for other models. Under
    ``--model-dtype auto`` a half dtype on a CPU is warned of (float32 is much faster there)."""
    if not takes_model_dtype(spec):
        return {}
    from vlr_plugins.mllm.model_dtype import dtype_name, slow_on_cpu

    note = slow_on_cpu(model, device) if dtype_option == "auto" else None
    if note:
        print(f"warning: {spec}: {note}", file=sys.stderr)
    return {"model_dtype": dtype_name(model)}


# --------------------------------------------------------------------------- text side


def load_text_encoder(spec: str | os.PathLike[str], *, map_location: str = "cpu",
                      setting: str | None = None) -> torch.nn.Module:
    """``blip:<hub name or folder>`` -> BLIP's pretrained text side (BLIP0 in the paper);
    a ``.pth`` path -> the text encoder of a ``vlr train`` (MMEngine) checkpoint
    (:func:`~vlr_plugins.text.load.load_text_encoder_checkpoint`: weights-only, the
    architecture from ``meta['vlr_text_encoder']``).

    Errors name ``setting`` (the option that gave ``spec``; default: the spec itself).
    """
    from vlr_plugins.text.load import load_blip_text_encoder, load_text_encoder_checkpoint

    parsed = parse_model_spec(spec, "text")
    if parsed.scheme == "blip":
        return load_blip_text_encoder(parsed.target, setting=setting or parsed.text)
    return load_text_encoder_checkpoint(parsed.text, map_location=map_location, setting=setting)


def load_checked_text_encoder(spec: str, option: str) -> torch.nn.Module:
    """The text encoder ``spec`` names (a ``vlr train`` checkpoint or ``blip:<name>``), as a
    command loads it: each way it can be unusable refused as one error naming ``option``."""
    from vlr_plugins.checkpoint_meta import check_text_encoder_checkpoint

    parsed = parse_model_spec(spec, "text")
    if parsed.scheme == "blip":
        if not parsed.target:
            raise UsageError(option, "'blip:' needs a model name or folder after the colon")
        with loading_pretrained(parsed.target, option):
            return load_text_encoder(spec, setting=option)
    if os.path.isdir(spec):
        raise UsageError(option, f"{spec} is a folder: give the .pth checkpoint `vlr train` wrote, or "
                                 f"blip:{spec} for a BLIP model folder")
    if not os.path.exists(spec):
        raise MissingFileError(f"{option}: no checkpoint at {spec} (give the .pth `vlr train` wrote, or "
                               "blip:<hub name or folder>)")
    # weights-only, with the architecture and the text encoder's weights: refused here, with
    # the file named, rather than by torch.load's traceback
    check_text_encoder_checkpoint(spec)
    return load_text_encoder(spec, setting=option)


def text_encoder_meta(spec: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``meta`` of the ``vlr train`` checkpoint ``spec`` names, checked as one a text
    encoder can be rebuilt from (:func:`~vlr_plugins.checkpoint_meta.check_text_encoder_checkpoint`);
    ``{}`` for ``blip:<name>``, which has none."""
    from vlr_plugins.checkpoint_meta import check_text_encoder_checkpoint

    parsed = parse_model_spec(spec, "text")
    return {} if parsed.scheme == "blip" else check_text_encoder_checkpoint(parsed.text)


def load_text_tokenizer(given: str | None, encoder: Any, model: str) -> Any:
    """The tokenizer of ``--tokenizer`` (``given``), else the one the text encoder names;
    refused when it has more tokens than the encoder embeds."""
    from transformers import AutoTokenizer

    path = given or getattr(encoder, "tokenizer_path", None)
    if not path:
        raise UsageError("--tokenizer", f"{model} names no tokenizer; pass one")
    setting = "--tokenizer" if given else f"--tokenizer (the tokenizer {model} names: {path})"
    with loading_pretrained(str(path), setting):
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    embeddings = getattr(getattr(encoder, "text_encoder", None), "get_input_embeddings", lambda: None)()
    vocab = getattr(embeddings, "num_embeddings", None)
    if vocab is not None and len(tokenizer) > vocab:
        raise UsageError("--tokenizer", f"{path} has {len(tokenizer)} tokens but {model} embeds only {vocab}: "
                                        "give the tokenizer it was trained with")
    return tokenizer


def split_mllm_spec(spec: str, setting: str = "--model") -> tuple[str, str | None]:
    """``"mllm:FOLDER[:PROMPT]"`` -> ``(FOLDER, PROMPT or None)``.

    A ``FOLDER`` that exists as written is taken whole (so a path may hold a colon);
    otherwise the text after the last colon is the prompt. A malformed spec is a
    :class:`~vlr_plugins.errors.UsageError` naming ``setting``.
    """
    parsed = parse_model_spec(spec, "text")
    if parsed.scheme != "mllm":
        raise UsageError(setting, f"{spec!r} is not an mllm: spec; expected {_MLLM_FORM}")
    if not parsed.target:
        raise UsageError(setting, f"{spec!r} names no model folder; expected {_MLLM_FORM}")
    return parsed.target, parsed.prompt


def mllm_model_folder(model: str, setting: str = "--model") -> tuple[str, str | None]:
    """The model folder (or Hub id) and EOL prompt a ``--model`` names: ``mllm:FOLDER[:PROMPT]``,
    as ``vlr eval`` and ``vlr precompute`` take it, or the folder itself, as ``vlr caption``
    and ``vlr lens`` also take it (``(model, None)``)."""
    if parse_model_spec(model, "text").scheme != "mllm":
        return model, None
    return split_mllm_spec(model, setting)


def load_mllm_spec(spec: str, *, setting: str = "--model", device: Any = None, **kwargs: Any) -> Any:
    """The :class:`~vlr_plugins.mllm.EOLEmbedder` ``spec`` (``mllm:FOLDER[:PROMPT]``) names,
    in eval mode on ``device``: :func:`~vlr_plugins.mllm.model_spec.load_mllm_embedder`
    (``kwargs``: ``dtype``, ``"auto"`` the checkpoint's own), every refusal naming ``setting``.

    Example::

        >>> emb = load_mllm_spec("mllm:Qwen/Qwen2-VL-7B-Instruct:care", device="cuda")  # doctest: +SKIP
        >>> emb.encode_text(["A dog runs."]).shape  # doctest: +SKIP
        torch.Size([1, 3584])
    """
    from vlr_plugins.mllm.model_spec import load_mllm_embedder

    folder, prompt = split_mllm_spec(spec, setting)
    return load_mllm_embedder(folder, prompt, spec=spec, setting=setting, device=device, **kwargs)


def load_text_model(spec: str, *, setting: str = "--model", device: str | torch.device = "cpu",
                    dtype: str | torch.dtype | None = None) -> Any:
    """The text model ``spec`` names, for ``open_clip:``, ``mllm:`` and ``module:callable`` specs.

    - ``open_clip:MODEL:CHECKPOINT_OR_TAG``: an open_clip or Long-CLIP model
      (:func:`~vlr_plugins.integrations.open_clip.text_model.load_open_clip_text_model`), on ``device``;
    - ``mllm:FOLDER[:PROMPT]``: a CaRe / E5-V :class:`~vlr_plugins.mllm.EOLEmbedder`
      (:func:`load_mllm_spec`), on ``device``, in ``dtype`` (``"auto"`` or None: the
      checkpoint's own): its ``encode_text`` embeds each text under the EOL prompt;
    - ``module.sub:attr``: ``attr`` of ``module.sub`` (the current folder searched first):
      an object with ``encode_text``, or a class or function that returns one when
      called without arguments (:func:`~vlr_plugins.eval.models.imported_text_model`).

    Every way the spec can be unusable is one :class:`~vlr_plugins.errors.UserError`
    naming ``setting``, as is a ``dtype`` for any spec but ``mllm:``; a model that cannot be
    downloaded (offline) a :class:`~vlr_plugins.errors.ModelLoadError`.
    """
    parsed = parse_model_spec(spec, "text")
    if _chosen(dtype) and parsed.scheme != "mllm":
        raise UsageError(setting, f"{spec!r}: a model dtype ({dtype}) is chosen for mllm: specs only; this model "
                                  "is loaded as its own code loads it")
    if parsed.scheme == "open_clip":
        from vlr_plugins.integrations.open_clip.text_model import load_open_clip_text_model

        return load_open_clip_text_model(*parsed.open_clip_parts, spec=parsed.text, setting=setting, device=device)
    if parsed.scheme == "mllm":
        return load_mllm_spec(spec, setting=setting, device=device, dtype=dtype)
    if parsed.scheme == "python":
        from vlr_plugins.eval.models import imported_text_model

        module_name, _, attr = parsed.python_parts
        return imported_text_model(module_name, attr, spec=spec, setting=setting)
    raise ValueError(f"{spec!r} names a checkpoint, which is loaded with its tokenizer, not by load_text_model")


# --------------------------------------------------------------------------- image and video side


def load_image_encoder(spec: str, *, setting: str = "encoder spec", **kwargs: Any) -> Any:
    """An image encoder from a string, as config files and ``vlr precompute --images --encoder`` name one.

    - ``"blip:<name_or_path>"``: a :class:`~vlr_plugins.precompute.BlipImageEncoder`;
      ``kwargs`` (``device``, ``dtype``) go to it. A model that cannot be loaded (not
      downloaded and no network, an unknown name, a folder without the files) is one
      :class:`~vlr_plugins.errors.ModelLoadError` naming it and ``setting``.
    - ``"mllm:FOLDER[:PROMPT]"``: the image side of a CaRe / E5-V MLLM
      (:class:`~vlr_plugins.mllm.model_spec.EOLImageEncoder`); ``kwargs`` (``device``,
      ``dtype``: the model's, ``"auto"`` its checkpoint's) go to :func:`load_mllm_spec`.
    - ``"module.sub:attr"`` (``attr`` may be dotted): imports ``module.sub`` (the current
      folder is searched first, as ``python -m`` does) and takes ``attr``
      (:func:`~vlr_plugins.precompute.images.imported_image_encoder`). A class is
      instantiated with ``kwargs``; anything else (a function, an instance) is returned
      as is and must be callable, mapping a list of RGB PIL images to an (n, D) tensor,
      one finite row per image. An ``int`` attribute ``dim`` and a ``str`` attribute
      ``name`` are used when present.

    ``setting`` names the spec's origin in messages (``vlr precompute`` passes
    ``"--encoder"``). A spec that names no usable encoder raises
    :class:`~vlr_plugins.errors.ImageEncoderError` (also an ``ImportError`` or
    ``AttributeError`` for a module that cannot be imported or lacks the attribute).
    """
    from vlr_plugins.errors import image_encoder_error
    from vlr_plugins.precompute.images import BlipImageEncoder, imported_image_encoder

    parsed = parse_model_spec(spec, "image")
    what = f"{setting} {spec!r}"
    if parsed.scheme == "mllm":
        from vlr_plugins.mllm.model_spec import EOLImageEncoder

        return EOLImageEncoder(load_mllm_spec(spec, setting=setting, **kwargs), spec)
    if parsed.scheme == "blip":
        if not parsed.target:
            raise image_encoder_error(f"{what}: needs a model name or path after the colon")
        with loading_pretrained(parsed.target, setting):
            return BlipImageEncoder(parsed.target, **kwargs)
    module_name, sep, attr = parsed.python_parts
    if not sep or not module_name or not attr:
        raise image_encoder_error(f"{what}: expected 'blip:<name_or_path>' or 'module.sub:attr'")
    return imported_image_encoder(module_name, attr, what, kwargs)


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
      :class:`~vlr_plugins.mllm.EOLEmbedder` (:func:`load_mllm_spec`), in ``dtype``
      (``"auto"`` or None: the checkpoint's own; :mod:`vlr_plugins.mllm.model_dtype`). It
      sees the frames the caller samples (``vlr precompute --frames/--sampler``; CaReBench:
      32, uniform), resized by its processor. ``dtype`` is refused for every other spec.
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
    import torch

    from vlr_plugins.precompute import video_encoders as towers

    parsed = parse_model_spec(spec, "video")
    what = f"{setting} {spec!r}"
    if _chosen(dtype) and parsed.scheme != "mllm":
        raise towers.tower_error(what, f"a model dtype ({dtype}) is chosen for mllm: specs only; this tower is "
                                       "loaded as it is stored")
    if parsed.scheme == "open_clip":
        if not parsed.target:
            raise towers.tower_error(what, "needs a model name after 'open_clip:' (e.g. open_clip:ViT-B-16:openai)")
        tower = towers.open_clip_tower(*parsed.open_clip_parts, what=what, setting=setting)
    elif parsed.scheme == "mllm":
        tower = load_mllm_spec(spec, setting=setting, device=device, dtype=dtype)
    elif parsed.scheme == "vlr":
        tower = towers.trained_tower(parsed.target, what)
    elif parsed.scheme == "tower_config":
        tower = towers.configured_tower(Path(spec), what, setting)
    else:
        module_name, sep, attr = parsed.python_parts
        if not sep or not module_name or not attr:
            raise towers.tower_error(what, "expected open_clip:MODEL[:PRETRAINED], a tower config (.yaml, .yml or "
                                           ".json) or module.sub:callable")
        tower = towers.imported_tower(module_name, attr, what)
    towers.tower_geometry(tower, what)
    if isinstance(tower, torch.nn.Module):
        tower = tower.to(device).eval()
    return tower
