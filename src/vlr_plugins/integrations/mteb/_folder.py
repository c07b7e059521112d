"""Which kind of export a folder is, read from its files only (nothing is loaded or run).

The four kinds ``vlr export`` writes (docs/hub.md):

* ``blip``: ``config.json`` of model type ``vlr_blip_text_encoder`` (paragraph supervision);
* ``dual_cls``: model type ``vlr_dual_cls_text_encoder`` (MVC);
* ``eol``: a ``vlr_eol`` block in ``config.json`` (CaRe, E5-V: an MLLM embedder);
* ``open_clip``: ``open_clip_config.json`` with a ``model_cfg`` beside ``open_clip_model.safetensors``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlr_plugins.errors import ConfigError, MissingFileError

__all__ = ["ExportFolder", "read_export_folder"]

_HF_KINDS = {"vlr_blip_text_encoder": "blip", "vlr_dual_cls_text_encoder": "dual_cls"}
_OPEN_CLIP_CONFIG, _OPEN_CLIP_WEIGHTS = "open_clip_config.json", "open_clip_model.safetensors"
_WHAT = ("expected a folder written by `vlr export` (a vlr_blip_text_encoder, vlr_dual_cls_text_encoder or "
         "EOL embedder config.json, or an open_clip open_clip_config.json)")


@dataclass(frozen=True)
class ExportFolder:
    """An export's folder, its kind (``blip``, ``dual_cls``, ``eol``, ``open_clip``) and its config."""

    path: Path
    kind: str
    config: dict[str, Any]

    @property
    def card_license(self) -> str | None:
        """The ``license:`` of the model card's front matter (``README.md``), if any."""
        card = self.path / "README.md"
        if not card.is_file():
            return None
        lines = card.read_text(encoding="utf-8", errors="replace").splitlines()
        if not lines or lines[0].strip() != "---":
            return None
        for line in lines[1:]:
            if line.strip() == "---":
                break
            key, _, value = line.partition(":")
            if key.strip() == "license" and value.strip():
                return value.strip().strip("'\"")
        return None

    @property
    def repo_id(self) -> str | None:
        """The Hub id the export was made for (``--repo-id``, recorded in its card), if any."""
        card = self.path / "README.md"
        if not card.is_file():
            return None
        for line in card.read_text(encoding="utf-8", errors="replace").splitlines():
            # the cards' loading snippets: from_pretrained("me/blip-c5", ...)
            if "from_pretrained(\"" in line:
                name = line.split("from_pretrained(\"", 1)[1].split("\"", 1)[0]
                if name.count("/") == 1 and not name.startswith((".", "/")):
                    return name
        return None


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def read_export_folder(folder: str | Path, option: str = "--model") -> ExportFolder:
    """The :class:`ExportFolder` at ``folder``; a :class:`~vlr_plugins.errors.UserError` naming
    ``option`` and the file when it is missing, not a folder, or not (or half) an export."""
    path = Path(folder)
    if not path.exists():
        raise MissingFileError(f"{option}: {path} does not exist; {_WHAT}")
    if not path.is_dir():
        raise ConfigError(f"{option}: {path} is not a folder; {_WHAT}")
    if (path / _OPEN_CLIP_CONFIG).is_file() and not (path / "config.json").is_file():
        config = _json(path / _OPEN_CLIP_CONFIG)
        if not isinstance(config.get("model_cfg"), dict):
            raise ConfigError(f"{option}: {path / _OPEN_CLIP_CONFIG} has no 'model_cfg' object, which open_clip "
                              "builds the model from")
        if not (path / _OPEN_CLIP_WEIGHTS).is_file():
            raise ConfigError(f"{option}: {path} has {_OPEN_CLIP_CONFIG} but no {_OPEN_CLIP_WEIGHTS}: half an "
                              "export; export it again")
        return ExportFolder(path, "open_clip", config)
    if not (path / "config.json").is_file():
        raise ConfigError(f"{option}: {path} has no config.json; {_WHAT}")
    config = _json(path / "config.json")
    kind = _HF_KINDS.get(config.get("model_type"))
    if kind is None and isinstance(config.get("vlr_eol"), dict):
        kind = "eol"
    if kind is None:
        raise ConfigError(f"{option}: {path / 'config.json'} is of model type {config.get('model_type')!r} and has "
                          f"no 'vlr_eol' block; {_WHAT}")
    adapter = config["vlr_eol"].get("adapter") if kind == "eol" else None
    weights = path / adapter if adapter else path
    if not any(weights.glob("*.safetensors")):
        raise ConfigError(f"{option}: {weights} has no *.safetensors weights beside its config.json: half an "
                          "export; export it again")
    return ExportFolder(path, kind, config)
