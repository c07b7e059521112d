"""MTEB's ``ModelMeta`` of an export: what MTEB records beside the scores, read from the folder and its towers.

* ``name``: ``--name``, else the Hub id the card's loading snippet names, else
  ``vlr-local/<folder name>`` (MTEB wants ``organization/name``);
* ``revision``: ``local-`` + the first 12 hex digits of a SHA-256 over the folder's config
  and weight files (names and bytes), so two different trainings never share MTEB's cache;
* ``modalities``: the towers the export holds; ``embed_dim``, ``max_tokens`` (the token
  budget texts are truncated at), ``n_parameters``; ``similarity_fn_name``: cosine;
* ``license``: the card's front matter ``license:``, if any.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mteb.models.model_meta import ModelMeta, ScoringFunction

from vlr_plugins.integrations.mteb._folder import ExportFolder

__all__ = ["export_model_meta", "folder_revision"]

_HASHED_SUFFIXES = (".json", ".safetensors")
_CHUNK = 8 * 2**20


def folder_revision(folder: Path) -> str:
    """``local-<12 hex>``: SHA-256 over every ``*.json`` / ``*.safetensors`` file of ``folder``
    (relative name and bytes, in sorted order)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in _HASHED_SUFFIXES):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    return "local-" + digest.hexdigest()[:12]


def _name(export: ExportFolder, name: str | None) -> str:
    if name:
        return name if "/" in name else f"vlr-local/{name}"
    return export.repo_id or f"vlr-local/{export.path.resolve().name}"


def export_model_meta(export: ExportFolder, towers: Any, *, loader: Callable[..., Any] | None = None,
                      name: str | None = None, view: str | None = None, dtype: str | None = None) -> ModelMeta:
    """The ``ModelMeta`` of ``export`` loaded as ``towers`` (:mod:`~vlr_plugins.integrations.mteb.towers`);
    ``loader`` (the encoder module's ``load_export_encoder``) builds the same encoder again
    (``meta.load_model()``) from the ``loader_kwargs`` recorded here."""
    loader_kwargs: dict[str, Any] = {"folder": str(export.path)}
    if name:
        loader_kwargs["name"] = name
    if view:
        loader_kwargs["view"] = view
    if dtype:
        loader_kwargs["dtype"] = dtype
    experiment = {k: v for k, v in (("view", view), ("dtype", dtype)) if v}  # a choice beside the export's own
    return ModelMeta(
        loader=loader,
        loader_kwargs=loader_kwargs,
        name=_name(export, name),
        revision=folder_revision(export.path),
        release_date=None,
        languages=None,
        n_parameters=towers.n_parameters,
        memory_usage_mb=None,
        max_tokens=towers.max_tokens,
        embed_dim=towers.embed_dim,
        license=export.card_license,
        open_weights=True,
        public_training_code=None,
        public_training_data=None,
        framework=list(towers.frameworks),
        reference=None,
        similarity_fn_name=ScoringFunction.COSINE,
        use_instructions=False,
        training_datasets=None,
        modalities=towers.modalities,
        model_type=["dense"],
        experiment_kwargs=experiment or None,
    )
