"""Export a trained text encoder as a Hub-ready transformers folder (safetensors, config, code, tokenizer)."""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from vlr_plugins._io import staged_dir
from vlr_plugins.hf._auto_class import registered_for_auto_class
from vlr_plugins.data.text_views import TextView
from vlr_plugins.errors import ConfigError, OutputExistsError, loading_pretrained
from vlr_plugins.hf.family import FAMILY

__all__ = ["check_export_target", "export_text_encoder"]

#: files that would need unpickling to load; an export must never contain one
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def _family_member(encoder: torch.nn.Module) -> type:
    name = type(encoder).__name__
    for _, model_cls in FAMILY:
        if model_cls.vlr_encoder_type == name:
            return model_cls
    known = ", ".join(m.vlr_encoder_type for _, m in FAMILY)
    raise TypeError(f"cannot export a {name}: vlr_plugins.hf has transformers classes for {known}")


def _recipe_fields(recipe: Any) -> tuple[str | None, dict[str, int], str | None]:
    """(name, token budgets of its text views, pretrained model) of a recipe name, ``Recipe`` or its dict."""
    if recipe is None or isinstance(recipe, str):
        return recipe, {}, None
    if hasattr(recipe, "to_dict"):
        recipe = recipe.to_dict()
    if not isinstance(recipe, Mapping):
        raise TypeError(f"recipe must be a name, a Recipe or Recipe.to_dict(), found {type(recipe).__name__}")
    views = recipe.get("text_views") or {}
    budgets: dict[str, int] = {}
    for view in (*views.get("positives", ()), *views.get("negatives", ())):
        key = TextView(**view).key
        budgets[key] = max(budgets.get(key, 0), int(view["max_tokens"]))
    return recipe.get("name"), budgets, (recipe.get("model") or {}).get("pretrained")


def _image_space(pretrained: str | None, embed_dim: int) -> dict[str, Any]:
    if pretrained:
        # the recipes align texts to BLIP's own frozen image embeddings: vision_proj of [CLS], normalised
        return {"model": pretrained, "projection": "vision_proj", "dim": embed_dim, "normalized": True}
    return {"dim": embed_dim, "normalized": True}


def _load_tokenizer(tokenizer: Any, encoder: torch.nn.Module) -> Any:
    if tokenizer is None:
        if getattr(encoder, "tokenizer_path", None) is None:
            raise ConfigError(f"{type(encoder).__name__} names no tokenizer; "
                              "pass tokenizer= (a tokenizer or its folder)")
        with loading_pretrained(str(encoder.tokenizer_path), "the tokenizer the checkpoint names (or tokenizer=)"):
            return encoder.load_tokenizer()
    if isinstance(tokenizer, (str, os.PathLike)):
        from transformers import AutoTokenizer

        with loading_pretrained(str(tokenizer), "tokenizer"):
            return AutoTokenizer.from_pretrained(str(tokenizer))
    if not hasattr(tokenizer, "save_pretrained"):
        raise TypeError("tokenizer must be a transformers tokenizer or its folder, "
                        f"found {type(tokenizer).__name__}")
    return tokenizer


def check_export_target(out_dir: str | os.PathLike, *, overwrite: bool = False,
                        flag: str = "overwrite=True") -> None:
    """Raise :class:`~vlr_plugins.errors.OutputExistsError` unless an export may be
    written at ``out_dir``: nothing is there, or (with ``overwrite``) an empty folder or an
    earlier export (a ``config.json`` or open_clip's ``open_clip_config.json`` beside
    ``*.safetensors``). A file, or a folder that
    holds anything else, is never replaced: replacing means deleting it.

    ``flag`` is how the message tells the caller to overwrite (``vlr export`` says
    ``--overwrite``).
    """
    out_dir = Path(out_dir)
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise OutputExistsError(f"cannot export to {out_dir}: it is a file")
    if not overwrite:
        raise OutputExistsError(f"{out_dir} exists; pass {flag} to replace it")
    names = {p.name for p in out_dir.iterdir()}
    # an MLLM adapter export keeps its weights in adapter/ (vlr_plugins.hf.export_eol)
    weights = any(n.endswith(".safetensors") for n in names) or (out_dir / "adapter" / "adapter_model.safetensors").is_file()
    if names and not (names & {"config.json", "open_clip_config.json"} and weights):
        raise OutputExistsError(
            f"cannot export to {out_dir}: it is a folder that holds files of something other than an "
            f"export (no config.json beside *.safetensors); refusing to replace it even with {flag}")


def export_text_encoder(
    encoder_or_checkpoint: torch.nn.Module | str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    tokenizer: Any = None,
    token_budgets: Mapping[str, int] | None = None,
    image_embedding_space: Mapping[str, Any] | None = None,
    recipe: Any = None,
    remote_code: bool = True,
    overwrite: bool = False,
    verify: bool = True,
    extra_files: Mapping[str, str | bytes] | None = None,
    image_side: Any = None,
    image_processor: Any = None,
    video_tower: torch.nn.Module | None = None,
    sentence_transformers: bool = True,
) -> Path:
    """Write ``out_dir``: a folder ``AutoModel.from_pretrained`` loads, with or without vlr-plugins.

    ``encoder_or_checkpoint``: a ``BlipTextEncoder`` or ``DualCLSTextEncoder``, a ``vlr
    train`` checkpoint (``.pth``) of one, or ``blip:<hub name or folder>`` (see
    :func:`vlr_plugins.specs.load_text_encoder`).

    Writes ``config.json`` (a member of the vlr retrieval family: ``vlr_blip_text_encoder``,
    ``vlr_dual_cls_text_encoder``), ``model.safetensors`` and the tokenizer files; with
    ``remote_code`` also the member's ``modeling_vlr*.py`` / ``configuration_vlr*.py`` and
    the config's ``auto_map``, so ``AutoModel.from_pretrained(out_dir, trust_remote_code=True)``
    works where vlr-plugins is not installed. Without it, ``import vlr_plugins.hf`` is needed.

    ``recipe``: its name, or the ``Recipe`` (or ``Recipe.to_dict()``) that trained the
    encoder, whose text views give the token budgets and whose ``model.pretrained`` names
    the image-embedding space; ``token_budgets`` / ``image_embedding_space`` override
    them. The tokenizer (default: the encoder's own) is saved with ``model_max_length``
    capped at the encoder's positions.

    The folder is written beside ``out_dir`` and renamed into place, so a reader never
    sees half an export; ``overwrite`` replaces an earlier export, never a file or a
    folder holding anything else (:func:`check_export_target`). ``verify`` reloads the
    weights from the written safetensors and checks they equal the encoder's. No file
    that needs unpickling is written, and none is read but through ``weights_only``; a
    checkpoint that is not one of ``vlr train`` is refused with one error naming it
    (:func:`~vlr_plugins.checkpoint_meta.check_text_encoder_checkpoint`).
    ``extra_files`` (name -> text or bytes; e.g. ``README.md``, eval results) are written
    into the folder before it is renamed into place.

    ``image_side`` (BLIP text encoders): the frozen image side the texts were aligned to,
    anything with BLIP's ``vision_model`` and ``vision_proj`` (a ``BlipImageEncoder``, a
    ``BlipForImageTextRetrieval``), bundled so the model's ``get_image_features`` equals the
    store rows ``vlr precompute`` wrote; ``image_processor`` (its ``BlipImageProcessor``,
    default ``image_side.processor``) is saved beside it, with a ``BlipProcessor`` so
    ``AutoProcessor`` gives both sides' inputs (:mod:`vlr_plugins.hf.image_side` finds the
    side a checkpoint was trained against). ``sentence_transformers`` also writes the files
    that make the folder a sentence-transformers model
    (:mod:`vlr_plugins.hf.sentence_transformers_towers`).

    ``video_tower``: the video tower trained with a ``DualCLSTextEncoder`` (MVC), bundled as
    the model's ``video_model`` (``config.video_config``, ``get_video_features``) with its
    video processor (``video_preprocessor_config.json``, ``video_processing_vlr.py``); a
    checkpoint that records one (``meta['vlr_video_encoder']``) brings it along by itself
    (:func:`vlr_plugins.hf.mvc_video.checkpoint_video_tower`).

    Example::

        >>> recipe = load_recipe("paragraph/c5")  # doctest: +SKIP
        >>> export_text_encoder("work_dirs/c5/epoch_10.pth", "blip-c5", recipe=recipe)  # doctest: +SKIP
        >>> AutoModel.from_pretrained("blip-c5", trust_remote_code=True)  # doctest: +SKIP
    """
    import vlr_plugins
    from vlr_plugins.hf.sentence_transformers_towers import sentence_transformers_files
    from vlr_plugins.specs import load_text_encoder, parse_model_spec, text_encoder_meta

    out_dir = Path(out_dir)
    check_export_target(out_dir, overwrite=overwrite)
    if isinstance(encoder_or_checkpoint, (str, os.PathLike)):
        spec = parse_model_spec(encoder_or_checkpoint)
        if spec.scheme == "blip":
            with loading_pretrained(spec.target, "encoder_or_checkpoint"):
                encoder = load_text_encoder(spec.text)
        else:
            text_encoder_meta(spec.text)  # one error naming the file, not torch.load's traceback
            encoder = load_text_encoder(spec.text)
            if video_tower is None and type(encoder).__name__ == "DualCLSTextEncoder":
                from vlr_plugins.hf.mvc_video import checkpoint_video_tower

                video_tower = checkpoint_video_tower(spec.text, encoder)
    elif isinstance(encoder_or_checkpoint, torch.nn.Module):
        encoder = encoder_or_checkpoint
    else:
        raise TypeError("encoder_or_checkpoint must be a text encoder module or a checkpoint path, "
                        f"found {type(encoder_or_checkpoint).__name__}")
    model_cls = _family_member(encoder)

    recipe_name, budgets, recipe_pretrained = _recipe_fields(recipe)
    if token_budgets is not None:
        budgets = {str(k): v for k, v in token_budgets.items()}
    embed_dim = encoder.embed_dim
    # a BLIP checkpoint names its own image space; a pretrained BERT names none
    pretrained = ((getattr(encoder, "pretrained", None) or recipe_pretrained)
                  if model_cls.vlr_image_space_from_pretrained else None)
    space = (dict(image_embedding_space) if image_embedding_space is not None
             else _image_space(pretrained, embed_dim))
    towers: dict[str, Any] = {}
    if image_side is not None:
        if not model_cls.vlr_image_space_from_pretrained:
            raise TypeError(f"a {type(encoder).__name__} export bundles no image side")
        towers["image_side"] = image_side
        image_processor = image_processor if image_processor is not None else getattr(image_side, "processor", None)
        if image_processor is None or not hasattr(image_processor, "save_pretrained"):
            raise TypeError("an image side needs its image processor (image_processor=, e.g. a BlipImageProcessor)")
    if video_tower is not None:
        if model_cls.vlr_encoder_type != "DualCLSTextEncoder":
            raise TypeError(f"video_tower= is for a DualCLSTextEncoder (MVC), not a {model_cls.vlr_encoder_type}")
        towers["video_tower"] = video_tower
    model = model_cls.from_vlr_encoder(encoder, token_budgets=budgets, image_embedding_space=space,
                                       recipe=recipe_name, vlr_plugins_version=vlr_plugins.__version__, **towers)

    tok = copy.deepcopy(_load_tokenizer(tokenizer, encoder))
    vocab = model.get_input_embeddings().num_embeddings
    if len(tok) > vocab:
        raise ConfigError(f"the tokenizer has {len(tok)} tokens but the text encoder embeds only {vocab}")
    positions = model.config.max_positions
    if positions is not None and (tok.model_max_length is None or tok.model_max_length > positions):
        # so that truncation=True without max_length never exceeds the positions
        tok.model_max_length = positions

    with staged_dir(out_dir) as tmp:
        code = ((type(model.config), "AutoConfig"), (type(model), "AutoModel")) if remote_code else ()
        with registered_for_auto_class(*code):
            model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        if getattr(model.config, "video_config", None) is not None:
            from vlr_plugins.hf.mvc_video import save_video_processor

            save_video_processor(model.config.video_config, tmp, remote_code=remote_code, tokenizer=tok)
        if image_side is not None:
            from transformers import BlipProcessor

            # preprocessor_config.json for AutoImageProcessor (transformers 4 reads only it),
            # processor_config.json for AutoProcessor: both sides' inputs
            image_processor.save_pretrained(tmp)
            BlipProcessor(image_processor=image_processor, tokenizer=tok).save_pretrained(tmp)
        files = dict(sentence_transformers_files(model.config)) if sentence_transformers else {}
        files.update(extra_files or {})
        for name, content in files.items():
            if name not in (extra_files or {}) and "/" in name:
                (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            elif os.path.basename(name) != name:
                raise ValueError(f"extra file names are plain names in the folder, found {name!r}")
            (tmp / name).write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        _check_export(tmp, model, model_cls, verify)
    return out_dir


def _check_export(folder: Path, model: torch.nn.Module, model_cls: type, verify: bool) -> None:
    pickled = sorted(p.name for p in folder.iterdir() if p.name.endswith(_PICKLE_SUFFIXES))
    if pickled:
        raise RuntimeError(f"export wrote files that would need unpickling to load: {pickled}")
    if not any(p.name.endswith(".safetensors") for p in folder.iterdir()):
        raise RuntimeError(f"export wrote no .safetensors weights in {folder}")
    if verify:
        back = model_cls.from_pretrained(folder, use_safetensors=True)
        theirs = back.state_dict()
        for key, value in model.state_dict().items():
            if key not in theirs or not torch.equal(theirs[key], value):
                raise RuntimeError(f"{folder}: weight {key!r} does not round-trip through safetensors")
