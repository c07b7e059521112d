"""An :class:`EOLEmbedder` from what a command line names: an MLLM folder or Hub id, or an export.

A plain MLLM (``Qwen/Qwen2-VL-7B-Instruct``, a stage-I folder) takes the prompt family it
is given (default ``care``). An export of :func:`vlr_plugins.hf.export_eol_embedder` brings
its own: its ``vlr_eol`` block holds the prompts and clip settings it was trained and
evaluated with, and for an adapter export the base model to put the adapter on.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from vlr_plugins.errors import ConfigError, UsageError, loading_pretrained
from vlr_plugins.mllm.embedder import EOLEmbedder
from vlr_plugins.mllm.media_input import VideoInput
from vlr_plugins.mllm.prompt import EOLPrompt

__all__ = ["check_mllm_folder", "export_prompt", "export_settings", "load_eol_embedder"]

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def export_settings(model: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The ``vlr_eol`` block of a local folder's ``config.json``, or None (not an export, or a Hub id)."""
    path = os.path.join(os.fspath(model), "config.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        try:
            config = json.load(f)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None
    settings = config.get("vlr_eol") if isinstance(config, dict) else None
    return settings if isinstance(settings, dict) else None


def check_mllm_folder(folder: str, setting: str, *, spec: str, form: str, needs: str) -> None:
    """Raise a :class:`~vlr_plugins.errors.UsageError` naming ``setting`` and ``spec`` (as the
    command line gave it) unless ``folder`` can be a multimodal LLM: a folder with a
    ``config.json`` that has a ``vision_config`` (or a vlr export of an adapter, whose base
    model has one), or a name that can be a Hub id. ``form`` says what the setting takes,
    ``needs`` why it needs an MLLM; a config without one is named by its ``model_type`` and
    ``architectures``. Nothing is loaded: this runs before any model does."""
    if os.path.isdir(folder):
        path = os.path.join(folder, "config.json")
        if not os.path.isfile(path):
            raise UsageError(setting, f"{spec!r}: {folder} holds no config.json, so it is not a transformers "
                                      f"model folder; expected {form}")
        try:
            with open(path, encoding="utf-8") as f:
                config = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise UsageError(setting, f"{spec!r}: {path} is not valid JSON ({e})") from None
        config = config if isinstance(config, dict) else {}
        eol = config.get("vlr_eol")
        adapter = isinstance(eol, dict) and eol.get("adapter")  # the base model it names holds the config
        if not adapter and not config.get("vision_config"):
            found = [f"model_type {config['model_type']!r}"] if config.get("model_type") else []
            if isinstance(config.get("architectures"), list) and config["architectures"]:
                found.append(f"architectures {', '.join(map(str, config['architectures']))}")
            raise UsageError(setting, f"{spec!r}: {path} describes no multimodal LLM (no vision_config"
                                      + "".join(f"; {f}" for f in found) + f"); {needs}")
        return
    if os.path.exists(folder):
        raise UsageError(setting, f"{spec!r}: {folder} is a file; expected a model folder ({form})")
    if not _HUB_ID.match(folder) or folder.startswith((".", "~")):
        raise UsageError(setting, f"{spec!r}: no such folder: {folder}")


def export_prompt(settings: dict[str, Any], where: str) -> EOLPrompt:
    """The :class:`EOLPrompt` (with its clip settings) of an export's ``vlr_eol`` block; ``where`` names the file."""
    raw = dict(settings.get("prompt") or {})
    try:
        video = VideoInput(**{k: v for k, v in (settings.get("video_input") or {}).items() if v is not None})
        return EOLPrompt(name=str(raw.get("name") or "export"), text=raw.get("text"), image=raw.get("image"),
                         video=raw.get("video"), chat_template=bool(raw.get("chat_template", True)),
                         strip=bool(raw.get("strip", False)), video_input=video, source=where)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}, key 'vlr_eol': {e}") from None


def load_eol_embedder(model: str | os.PathLike[str], *, prompt: str | os.PathLike[str] | None = None,
                      setting: str = "model", **kwargs: Any) -> EOLEmbedder:
    """The :class:`EOLEmbedder` of ``model`` (a folder or Hub id of an MLLM or LLM, or an export).

    ``prompt``: a shipped family or a YAML file; default: the export's own prompts, else
    ``care``. ``kwargs`` go to :class:`EOLEmbedder` (``dtype``, ``device``, ``num_frames``,
    ...). A model that cannot be loaded is a :class:`~vlr_plugins.errors.ModelLoadError`
    naming ``setting``.
    """
    spec = os.fspath(model)
    settings = export_settings(spec)
    if settings is None:
        with loading_pretrained(spec, setting, needs="config.json"):
            return EOLEmbedder(spec, prompt=prompt or "care", **kwargs)
    chosen = prompt if prompt is not None else export_prompt(settings, os.path.join(spec, "config.json"))
    kwargs.setdefault("max_text_tokens", settings.get("max_text_tokens"))
    adapter = settings.get("adapter")
    if not adapter:
        with loading_pretrained(spec, setting):
            return EOLEmbedder(spec, prompt=chosen, kind=settings.get("kind", "auto"), **kwargs)
    base = settings.get("base_model")
    if not base:
        raise ConfigError(f"{spec}/config.json: vlr_eol.adapter is set but vlr_eol.base_model names no base model")
    device = kwargs.pop("device", None)
    with loading_pretrained(str(base), f"{setting} (the base model {spec} names)"):
        base_embedder = EOLEmbedder(str(base), prompt=chosen, kind=settings.get("kind", "auto"), **kwargs)
    from peft import PeftModel

    with loading_pretrained(spec, setting):
        merged = PeftModel.from_pretrained(base_embedder.model, spec, subfolder=adapter).merge_and_unload()
    keep = {k: v for k, v in kwargs.items() if k not in ("dtype", "attn_implementation", "trust_remote_code")}
    return EOLEmbedder(model=merged.eval(), processor=base_embedder.processor, prompt=chosen,
                       kind=base_embedder.kind, device=device, **keep)
