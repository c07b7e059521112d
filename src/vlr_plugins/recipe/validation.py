"""Recipe validation: every key known, every value of its type and range, views buildable,
the loss and model arguments acceptable to their constructors and the loss able to consume
the views (:mod:`~vlr_plugins.recipe.arguments`); errors name the file and the dotted key
(:class:`RecipeError`).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from pathlib import Path
from typing import Any

from vlr_plugins.data.schemas import SAMPLE_SCHEMAS
from vlr_plugins.recipe.arguments import check_loss_against_views, check_model_arguments
from vlr_plugins.recipe.errors import RecipeError, Source
from vlr_plugins.recipe.schema import (
    DataSpec,
    EvalSplit,
    HardNegativeBatching,
    Recipe,
    TextView,
    TextViews,
    TrainSpec,
    VideoSpec,
)
from vlr_plugins.recipe.values import typed_value
from vlr_plugins.recipe.video_text import check_not_video_text, check_video_text, check_video_text_train

__all__ = ["SCHEMA", "check_keys", "build_text_views", "check_loss_against_views", "recipe_from_dict"]

#: Allowed keys per section; ``None`` = free-form mapping checked elsewhere.
_VIEW_KEYS = {f.name for f in dataclasses.fields(TextView)}
SCHEMA: dict[str, Any] = {
    "name": None,
    "description": None,
    "reading": None,
    "paper": None,
    "text_views": {"positives": "views", "negatives": "views"},
    "loss": None,
    "model": None,
    "data": {f.name: None for f in dataclasses.fields(DataSpec)},
    "train": {f.name: None for f in dataclasses.fields(TrainSpec)},
    "eval": "splits",
    "video": {f.name: None for f in dataclasses.fields(VideoSpec)},
}


def check_keys(raw: dict[str, Any], schema: dict[str, Any], path: Path | Source, prefix: str) -> None:
    """Raise :class:`RecipeError` for the first key of ``raw`` that ``schema`` does not allow."""
    for k, v in raw.items():
        key = f"{prefix}{k}"
        if k not in schema:
            allowed = ", ".join(sorted(schema))
            raise RecipeError(path, key, f"unknown key (allowed here: {allowed})")
        sub = schema[k]
        if isinstance(sub, dict):
            if not isinstance(v, dict):
                raise RecipeError(path, key, f"expected a mapping, found {type(v).__name__}")
            check_keys(v, sub, path, key + ".")
        elif sub == "views":
            if not isinstance(v, list):
                raise RecipeError(path, key, f"expected a list of views, found {type(v).__name__}")
            for i, view in enumerate(v):
                if not isinstance(view, dict):
                    raise RecipeError(path, f"{key}[{i}]", "expected a mapping")
                _check_view_keys(view, path, f"{key}[{i}]")
        elif sub == "splits":
            keys = {f.name for f in dataclasses.fields(EvalSplit)}
            if not isinstance(v, list):
                raise RecipeError(path, key, "expected a list of splits")
            for i, split in enumerate(v):
                if not isinstance(split, dict):
                    raise RecipeError(path, f"{key}[{i}]", "expected a mapping")
                for sk in split:
                    if sk not in keys:
                        raise RecipeError(path, f"{key}[{i}].{sk}",
                                          f"unknown key (allowed: {', '.join(sorted(keys))})")


def _check_view_keys(view: dict[str, Any], path: Path | str, key: str) -> None:
    for vk in view:
        if vk not in _VIEW_KEYS:
            raise RecipeError(path, f"{key}.{vk}", f"unknown key (allowed: {', '.join(sorted(_VIEW_KEYS))})")


def _build(cls: type, raw: dict[str, Any], path: Path | str, prefix: str,
           checked: dict[str, Any] | None = None) -> Any:
    """``cls(**raw)`` with every value type-checked; ``checked`` values are taken as they are."""
    hints = {f.name: f.type for f in dataclasses.fields(cls)}
    resolved = inspect.get_annotations(cls, eval_str=True)
    kwargs = dict(checked or {})
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        if f.name in kwargs:
            continue
        if f.name in raw:
            kwargs[f.name] = typed_value(path, key, raw[f.name], resolved.get(f.name, hints[f.name]))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise RecipeError(path, key, "missing (required)")
    return cls(**kwargs)


def _view_fields(raw: Any, path: Path | str, key: str, schema: str) -> tuple[str, ...]:
    """A view's ``field``: one sample field, or a non-empty list of them (a candidate set)."""
    fields = raw if isinstance(raw, list) else [raw]
    if not fields or not all(isinstance(f, str) for f in fields):
        raise RecipeError(path, key, f"expected a field name or a list of field names, found {raw!r}")
    known = SAMPLE_SCHEMAS[schema]
    for f in fields:
        if f not in known:
            other = [name for name, fs in SAMPLE_SCHEMAS.items() if f in fs]
            hint = f"; {f!r} is a field of data.schema: {other[0]}" if other else ""
            named = "training samples" if schema == "paragraph" else f"{schema} training samples"
            raise RecipeError(path, key, f"{named} have no text field {f!r} "
                                         f"(they have: {', '.join(known)}){hint}")
    if len(set(fields)) != len(fields):
        raise RecipeError(path, key, f"a field is named twice in {fields}")
    return tuple(fields)


def _build_view(raw: dict[str, Any], path: Path | str, key: str, schema: str) -> TextView:
    if not isinstance(raw, dict):
        raise RecipeError(path, key, f"expected a mapping, found {type(raw).__name__}")
    _check_view_keys(raw, path, key)
    if "field" not in raw:
        raise RecipeError(path, f"{key}.field", "missing: which sample field this view reads")
    fields = _view_fields(raw["field"], path, f"{key}.field", schema)
    if "max_tokens" not in raw:
        raise RecipeError(path, f"{key}.max_tokens", "missing token budget for this view")
    view = _build(TextView, raw, path, key + ".", checked={"field": fields[0] if len(fields) == 1 else fields})
    if view.max_tokens < 3:
        raise RecipeError(path, f"{key}.max_tokens", f"expected >= 3 (specials included), found {view.max_tokens}")
    if view.take == "all" and view.count is not None:
        raise RecipeError(path, f"{key}.count", "count is only meaningful with take: random or first")
    if view.take != "all":
        if view.count is None or view.count < 1:
            raise RecipeError(path, f"{key}.count", f"take: {view.take} needs count >= 1")
        if len(fields) == 1 and SAMPLE_SCHEMAS[schema][fields[0]] == "one" and view.count != 1:
            raise RecipeError(path, f"{key}.count", f"field {fields[0]!r} holds one text; count must be 1")
    return view


def build_text_views(raw: dict[str, Any], path: str | os.PathLike, key: str = "text_views",
                     schema: str = "paragraph") -> TextViews:
    """Validate ``{positives: [...], negatives: [...]}`` against the text fields of the sample
    ``schema`` (``data.schema``); errors name ``path`` and ``key``."""
    if not isinstance(raw, dict):
        raise RecipeError(path, key, f"expected a mapping of positives / negatives, found {type(raw).__name__}")
    for k in raw:
        if k not in ("positives", "negatives"):
            raise RecipeError(path, f"{key}.{k}", "unknown key (allowed here: negatives, positives)")
    for k in ("positives", "negatives"):
        if raw.get(k) is not None and not isinstance(raw[k], list):
            raise RecipeError(path, f"{key}.{k}", f"expected a list of views, found {type(raw[k]).__name__}")
    if not raw.get("positives"):
        raise RecipeError(path, f"{key}.positives", "at least one positive view is required")
    return TextViews(
        positives=tuple(_build_view(v, path, f"{key}.positives[{i}]", schema)
                        for i, v in enumerate(raw["positives"])),
        negatives=tuple(_build_view(v, path, f"{key}.negatives[{i}]", schema)
                        for i, v in enumerate(raw.get("negatives") or [])),
    )


#: train.<key> -> (lowest allowed, whether the lowest is allowed, what that reads as)
_TRAIN_RANGES: dict[str, tuple[float, bool, str]] = {
    "batch_size": (1, True, ">= 1"), "epochs": (1, True, ">= 1"), "lr": (0, False, "> 0"),
    "weight_decay": (0, True, ">= 0"), "warmup_steps": (0, True, ">= 0"), "min_lr": (0, True, ">= 0"),
    "num_workers": (0, True, ">= 0"), "checkpoint_interval": (1, True, ">= 1"),
    "max_keep_checkpoints": (-1, True, ">= 1, or -1 to keep all"), "log_interval": (1, True, ">= 1"),
    "warmup_epochs": (0, True, ">= 0"), "length_blocks": (1, True, ">= 1 (1: one padded block per batch)"),
}


def _check_train(train: TrainSpec, path: Path) -> None:
    """Optimisation values a trainer would refuse only once it runs (AdamW's lr, betas...)."""
    for k, (low, inclusive, expected) in _TRAIN_RANGES.items():
        value = getattr(train, k)
        if value < low or (value == low and not inclusive) or (k == "max_keep_checkpoints" and value == 0):
            raise RecipeError(path, f"train.{k}", f"expected {expected}, found {value}")
    if not 0 < train.warmup_start_factor <= 1:
        raise RecipeError(path, "train.warmup_start_factor",
                          f"expected 0 < factor <= 1, found {train.warmup_start_factor}")
    for i, b in enumerate(train.betas):
        if not 0 <= b < 1:
            raise RecipeError(path, f"train.betas[{i}]", f"expected 0 <= beta < 1, found {b}")
    if train.grad_clip is not None and not train.grad_clip > 0:
        raise RecipeError(path, "train.grad_clip", f"expected > 0 (or null for no clipping), found {train.grad_clip}")
    if train.min_lr > train.lr:
        raise RecipeError(path, "train.min_lr", f"{train.min_lr} is above train.lr {train.lr}")
    if train.warmup_epochs and train.warmup_steps:
        raise RecipeError(path, "train.warmup_epochs", f"{train.warmup_epochs} warm-up epoch(s) and train.warmup_steps "
                                                       f"{train.warmup_steps}: give one of them (the other 0)")


def recipe_from_dict(raw: dict[str, Any], path: str | os.PathLike | None = None) -> Recipe:
    """Validate a merged recipe mapping (``path`` is used in error messages)."""
    p = Path(path) if path else Path("<recipe>")
    check_keys(raw, SCHEMA, p, "")
    for key in ("name", "text_views", "loss", "model"):
        if key not in raw:
            raise RecipeError(p, key, "missing (required)")
    data_raw = raw.get("data") if isinstance(raw.get("data"), dict) else {}
    schema = typed_value(p, "data.schema", data_raw.get("schema", "paragraph"),
                         inspect.get_annotations(DataSpec, eval_str=True)["schema"])
    views = build_text_views(raw["text_views"], p, schema=schema)
    if schema == "mvc":
        check_video_text(raw, views, p)
    else:
        check_loss_against_views(raw["loss"], views, p)
    if not isinstance(raw["model"], dict) or "type" not in raw["model"]:
        raise RecipeError(p, "model.type", "missing: name a registered model (vlr list models)")
    check_model_arguments(raw["model"], p)
    data = _build(DataSpec, data_raw, p, "data.",
                  checked={"hard_negatives": _hard_negative_batching(data_raw.get("hard_negatives"), p)})
    if not 0.0 < data.fraction <= 1.0:
        raise RecipeError(p, "data.fraction", f"expected 0 < fraction <= 1, found {data.fraction}")
    train = _build(TrainSpec, raw.get("train") or {}, p, "train.")
    _check_train(train, p)
    splits = tuple(_build(EvalSplit, s, p, f"eval[{i}].") for i, s in enumerate(raw.get("eval") or []))
    video = _build(VideoSpec, raw["video"], p, "video.") if raw.get("video") is not None else None
    if schema == "mvc":
        video = _checked_video(video, raw, p)
        check_video_text_train(train, p)
    else:
        check_not_video_text(raw, data, train, p)
    return Recipe(
        name=typed_value(p, "name", raw["name"], str),
        description=typed_value(p, "description", raw.get("description", ""), str),
        reading=typed_value(p, "reading", raw.get("reading", ""), str),
        paper=typed_value(p, "paper", raw.get("paper", ""), str),
        text_views=views,
        loss=dict(raw["loss"]),
        model=dict(raw["model"]),
        data=data,
        train=train,
        eval=splits,
        video=video,
        source=str(path) if path else None,
    )


def _hard_negative_batching(raw: Any, p: Path) -> HardNegativeBatching | None:
    """``data.hard_negatives``: a mapping of :class:`HardNegativeBatching`'s keys (``{}``: its
    defaults), or null (off)."""
    key = "data.hard_negatives"
    if raw is None:
        return None
    allowed = [f.name for f in dataclasses.fields(HardNegativeBatching)]
    if not isinstance(raw, dict):
        raise RecipeError(p, key, f"expected a mapping such as {{per_anchor: 1}} (how many mined hard-negative "
                                  f"videos join each anchor's batch), or null for none; found {raw!r}")
    for k in raw:
        if k not in allowed:
            raise RecipeError(p, f"{key}.{k}", f"unknown key (allowed here: {', '.join(allowed)})")
    spec = _build(HardNegativeBatching, raw, p, key + ".")
    if spec.per_anchor < 1:
        raise RecipeError(p, f"{key}.per_anchor", f"expected an integer >= 1 (mined hard-negative videos batched "
                                                  f"with each anchor; leave data.hard_negatives out for none), "
                                                  f"found {spec.per_anchor}")
    return spec


def _checked_video(video: VideoSpec | None, raw: dict[str, Any], p: Path) -> VideoSpec:
    """An ``mvc`` recipe's ``video`` section, its values in range."""
    if video is None or video.encoder is None:
        raise RecipeError(p, "video.encoder", "missing: an mvc recipe trains a video tower (e.g. type: SpaceTimeViT)")
    for key, low in (("frames", 1), ("image_size", 1)):
        if getattr(video, key) < low:
            raise RecipeError(p, f"video.{key}", f"expected >= {low}, found {getattr(video, key)}")
    lo, hi = video.crop_scale
    if not 0 < lo <= hi <= 1:
        raise RecipeError(p, "video.crop_scale", f"expected 0 < min <= max <= 1 (shares of the frame's area), "
                                                 f"found {list(video.crop_scale)}")
    if video.std is not None and min(video.std) <= 0:
        raise RecipeError(p, "video.std", f"expected positive values, found {list(video.std)}")
    if (video.mean is None) != (video.std is None):
        given = "video.mean" if video.mean is not None else "video.std"
        raise RecipeError(p, given, "give video.mean and video.std together (or neither: the tower's own)")
    if video.checkpoint is not None and not video.checkpoint:
        raise RecipeError(p, "video.checkpoint", "expected a file path, '???' (the run gives it) or null")
    return video
