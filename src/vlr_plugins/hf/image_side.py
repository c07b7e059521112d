"""Which frozen image side a paragraph-supervision export bundles beside its trained text tower.

The recipes align texts to image embeddings precomputed into a store (``vlr precompute
--images SRC --encoder SPEC --out STORE``, whose ``index.json`` records ``SPEC``); an
export is a whole retrieval model only with that same image side. :func:`find_image_side`
decides, in this order:

1. the encoder the caller names (``vlr export --image-encoder blip:NAME``);
2. the encoder recorded by the store the recipe trained against
   (``meta['vlr_recipe']['data']['image_embeddings']``), when that folder is here;
3. the BLIP model the text encoder started from (``pretrained``): the paper's setting,
   where the store holds that model's own image embeddings;

and otherwise exports the text side alone. A store written by anything but a BLIP
image side (a ``module:callable`` or ``mllm:`` encoder) cannot be bundled: the export is
text-only and says so, and ``image_embedding_space`` names the encoder to embed images
with. Every choice comes back with a sentence saying where it came from, which ``vlr
export`` prints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlr_plugins.errors import DataFormatError, UsageError

__all__ = ["ImageSide", "find_image_side", "load_image_side"]


@dataclass
class ImageSide:
    """The image side an export bundles (``model`` set: BLIP's name or folder), or why none.

    ``space``: what the export records as ``image_embedding_space`` (the encoder spec, the
    store, the size); ``source``: one sentence on where the choice came from.
    """

    model: str | None
    source: str
    space: dict[str, Any] = field(default_factory=dict)


def _blip_target(spec: str, *, bare: bool = True) -> str | None:
    """BLIP's name or folder for an encoder spec, else ``None``.

    ``vlr precompute`` records the ``--encoder`` spec (``blip:NAME``); the Python API
    records ``BlipImageEncoder.name`` (the bare ``NAME``: a BLIP folder or a Hub id, taken
    when ``bare``); every other encoder records ``module:attr`` or ``mllm:...``, or a name of
    its own, none of which is taken.
    """
    import json
    import re

    from vlr_plugins.specs import parse_model_spec

    parsed = parse_model_spec(spec, "image")
    if parsed.scheme == "blip":
        return parsed.target or None
    if not bare or parsed.scheme != "python" or ":" in spec:
        return None
    config = Path(spec) / "config.json"
    if config.is_file():
        try:
            return spec if json.loads(config.read_text(encoding="utf-8")).get("model_type") == "blip" else None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
            return None
    return spec if re.fullmatch(r"[\w.-]+/[\w.-]+", spec) and not os.path.exists(spec) else None


def _store_record(recipe: Any) -> tuple[str | None, Any]:
    """(the store folder the recipe trained against, its :class:`~vlr_plugins.data.EmbeddingStore`)
    or ``(folder, None)`` when it is not here; ``(None, None)`` when the recipe names none."""
    from vlr_plugins.data import EmbeddingStore

    data = recipe.get("data") if isinstance(recipe, dict) else None
    store = data.get("image_embeddings") if isinstance(data, dict) else None
    if not isinstance(store, str) or not store:
        return None, None
    if not (Path(store) / "index.json").is_file():
        return store, None
    return store, EmbeddingStore(store)  # its index.json read and checked as every reader does


def find_image_side(meta: dict[str, Any], text_encoder: Any, *, image_encoder: str | None = None,
                    text_only: bool = False, setting: str = "--image-encoder") -> ImageSide:
    """The image side to bundle for a checkpoint with ``meta`` and its loaded ``text_encoder``.

    ``image_encoder``: a ``blip:NAME`` spec the caller names (``setting`` in messages);
    ``text_only``: bundle none. A store the recipe names that holds embeddings of another
    size than the text encoder's is refused (:class:`~vlr_plugins.errors.DataFormatError`):
    the checkpoint was not trained against it.
    """
    dim = int(text_encoder.embed_dim)
    store, record = _store_record(meta.get("vlr_recipe"))
    recorded = record.meta.get("encoder") if record is not None else None
    recorded = recorded if isinstance(recorded, str) else None
    if record is not None and record.dim != dim:
        raise DataFormatError(Path(store) / "index.json", f"the store holds {record.dim}-d image embeddings, "
                              f"but the text encoder embeds into {dim} dimensions: it was not trained against "
                              "this store", field="dim")
    space: dict[str, Any] = {"dim": dim, "normalized": True}
    if store:
        space["store"] = store
    if text_only:
        if recorded:
            space["encoder"] = recorded
        return ImageSide(None, "text side only (--text-only)", space)
    if image_encoder is not None:
        target = _blip_target(image_encoder, bare=False)
        if target is None:
            raise UsageError(setting, f"{image_encoder!r} is not a BLIP image side; expected blip:<hub name or "
                                      "folder> (a module:callable or mllm: encoder cannot be bundled in a "
                                      "BLIP export: pass --text-only)")
        note = f" (the store {store} records {recorded})" if recorded and _blip_target(recorded) != target else ""
        return ImageSide(target, f"image side: {image_encoder}, as {setting} names it{note}",
                         {**space, "model": target, "projection": "vision_proj", "encoder": image_encoder})
    if recorded:
        target = _blip_target(recorded)
        if target is None:
            return ImageSide(None, f"text side only: the image embeddings in {store} were made by {recorded}, which "
                                   "is not a BLIP image side and cannot be bundled; embed images with it "
                                   "(recorded as image_embedding_space.encoder)", {**space, "encoder": recorded})
        return ImageSide(target, f"image side: {recorded}, the encoder of the store the recipe trained against "
                                 f"({store})",
                         {**space, "model": target, "projection": "vision_proj", "encoder": recorded})
    pretrained = getattr(text_encoder, "pretrained", None)
    if pretrained:
        where = (f"the store {store} is not on this machine, so " if store and record is None else "")
        return ImageSide(str(pretrained), f"image side: {where}BLIP {pretrained}, the model the text encoder "
                                          f"started from (name another with {setting})",
                         {**space, "model": str(pretrained), "projection": "vision_proj"})
    lacking = f"the store {store} is not on this machine and " if store else ""
    return ImageSide(None, f"text side only: {lacking}the checkpoint names no BLIP model to take the image side "
                           f"from; name one with {setting} blip:<hub name or folder>", space)


def load_image_side(side: ImageSide, dim: int, *, setting: str = "--image-encoder") -> tuple[Any, Any]:
    """(BLIP's image side: ``vision_model`` + ``vision_proj``, its ``BlipImageProcessor``) of
    ``side.model``; one error naming it when it cannot be loaded or embeds into another size."""
    from vlr_plugins.errors import ConfigError, loading_pretrained
    from vlr_plugins.precompute.images import BlipImageEncoder

    if os.path.isdir(side.model):
        missing = [n for n in ("config.json", "preprocessor_config.json") if not (Path(side.model) / n).is_file()]
        if missing:
            raise ConfigError(f"{setting}: {side.model} is not a whole BLIP folder (no {', '.join(missing)}); "
                              "save it with BlipForImageTextRetrieval.save_pretrained and its BlipImageProcessor")
    with loading_pretrained(side.model, setting):
        encoder = BlipImageEncoder(side.model)
    if encoder.dim != dim:
        raise ConfigError(f"{setting}: {side.model}'s vision_proj embeds into {encoder.dim} dimensions, the text "
                          f"encoder into {dim}: not the embedding space the text encoder was trained in")
    return encoder, encoder.processor
