"""Trainer-neutral recipes: YAML files validated into :class:`Recipe`.

A recipe says *what* is trained (model, text views, loss, hyperparameters); the
MMEngine, LAVIS and open_clip integrations each translate the same recipe into their
own configs. The format is documented in ``docs/recipes.md``.

Loading is strict: an unknown key, a text field that training samples do not have,
a view without a token budget, or a loss that cannot consume the views is an error
naming the file and the dotted key (``RecipeError``).

A file may start from others with ``_base_: other.yaml`` (a path relative to the
file, or a list of them); mappings are merged key by key, lists and scalars replace.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from vlr_plugins._shipped import shipped_dirs
from vlr_plugins.data.sample import TEXT_FIELDS
from vlr_plugins.errors import UserError

__all__ = [
    "RecipeError",
    "TextView",
    "TextViews",
    "DataSpec",
    "EvalSplit",
    "TrainSpec",
    "Recipe",
    "load_recipe",
    "recipe_dirs",
    "list_recipes",
    "find_recipe",
    "build_text_views",
]

_TAKE = ("all", "random", "first")


class RecipeError(UserError, ValueError):
    """A recipe file is invalid; the message names the file and the dotted key."""

    def __init__(self, path: str | os.PathLike | None, key: str, message: str) -> None:
        self.path, self.key = (str(path) if path else "<recipe>"), key
        super().__init__(f"{self.path}: {key}: {message}" if key else f"{self.path}: {message}")


@dataclass(frozen=True)
class TextView:
    """One source of texts for an image: a sample field, how many to take, its budget.

    ``take='all'`` uses every text of the field; ``'random'`` draws ``count`` of them
    without replacement at every step (a new draw each epoch); ``'first'`` the first
    ``count``. ``max_tokens`` is the tokenizer budget, special tokens included.
    """

    field: str
    max_tokens: int
    take: Literal["all", "random", "first"] = "all"
    count: int | None = None


@dataclass(frozen=True)
class TextViews:
    """Which texts are positives of an image and which are its hard negatives."""

    positives: tuple[TextView, ...]
    negatives: tuple[TextView, ...] = ()

    @property
    def fields(self) -> set[str]:
        return {v.field for v in (*self.positives, *self.negatives)}

    @property
    def max_positives(self) -> int | None:
        """Upper bound of positives per image, ``None`` when a view takes a whole list."""
        return _bound(self.positives)

    @property
    def max_negatives(self) -> int | None:
        return _bound(self.negatives)


def _bound(views: tuple[TextView, ...]) -> int | None:
    total = 0
    for v in views:
        if v.take != "all":
            total += v.count or 0
        elif TEXT_FIELDS[v.field] == "one":
            total += 1
        else:
            return None
    return total


@dataclass(frozen=True)
class DataSpec:
    """Where training samples and the precomputed image embeddings live.

    ``fraction`` < 1 keeps a seeded random subset of the samples (the data-efficiency
    ablation); ``seed`` makes the subset and the per-step view draws reproducible.
    """

    train: str | None = None
    image_embeddings: str | None = None
    fraction: float = 1.0
    seed: int = 0


@dataclass(frozen=True)
class EvalSplit:
    """A retrieval split evaluated during/after training (JSON Lines of ``{id, texts}``)."""

    name: str
    ann_file: str
    max_tokens: int
    image_embeddings: str | None = None


@dataclass(frozen=True)
class TrainSpec:
    """Optimisation hyperparameters (the paper's: AdamW 1e-5, batch 256, 500 warm-up, 10 epochs)."""

    batch_size: int = 256
    epochs: int = 10
    lr: float = 1e-5
    weight_decay: float = 0.05
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = 500
    warmup_start_factor: float = 0.001
    min_lr: float = 0.0
    schedule: Literal["cosine", "constant"] = "cosine"
    grad_clip: float | None = None
    amp: bool = False
    num_workers: int = 2
    seed: int = 0
    checkpoint_interval: int = 1
    max_keep_checkpoints: int = 3
    log_interval: int = 10
    drop_last: bool = True


@dataclass(frozen=True)
class Recipe:
    """A validated recipe; ``source`` is the file it came from."""

    name: str
    text_views: TextViews
    loss: dict[str, Any]
    model: dict[str, Any]
    description: str = ""
    reading: str = ""
    paper: str = ""
    data: DataSpec = field(default_factory=DataSpec)
    train: TrainSpec = field(default_factory=TrainSpec)
    eval: tuple[EvalSplit, ...] = ()
    source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("source")
        return d

    def replace(self, **changes: Any) -> Recipe:
        return dataclasses.replace(self, **changes)


# --------------------------------------------------------------------------- loading


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
    except FileNotFoundError:
        raise RecipeError(path, "", "file not found") from None
    except yaml.YAMLError as e:
        raise RecipeError(path, "", f"not valid YAML: {e}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RecipeError(path, "", f"expected a mapping at top level, found {type(raw).__name__}")
    return raw


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _load_with_bases(path: Path, seen: tuple[Path, ...] = ()) -> tuple[dict[str, Any], list[Path]]:
    path = path.resolve()
    if path in seen:
        chain = " -> ".join(str(p) for p in (*seen, path))
        raise RecipeError(path, "_base_", f"circular _base_ chain: {chain}")
    raw = _read_yaml(path)
    bases = raw.pop("_base_", [])
    bases = [bases] if isinstance(bases, str) else bases
    if not isinstance(bases, list) or not all(isinstance(b, str) for b in bases):
        raise RecipeError(path, "_base_", "expected a path or a list of paths")
    # every file is checked against the schema on its own, so an unknown key names
    # the file it was written in, not the file that inherits it
    _check_keys(raw, _SCHEMA, path, "")
    merged: dict[str, Any] = {}
    files: list[Path] = []
    for b in bases:
        sub, sub_files = _load_with_bases(path.parent / b, (*seen, path))
        merged = _merge(merged, sub)
        files += sub_files
    return _merge(merged, raw), [*files, path]


# Allowed keys per section; ``None`` = free-form mapping checked elsewhere.
_VIEW_KEYS = {f.name for f in dataclasses.fields(TextView)}
_SCHEMA: dict[str, Any] = {
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
}


def _check_keys(raw: dict[str, Any], schema: dict[str, Any], path: Path, prefix: str) -> None:
    for k, v in raw.items():
        key = f"{prefix}{k}"
        if k not in schema:
            allowed = ", ".join(sorted(schema))
            raise RecipeError(path, key, f"unknown key (allowed here: {allowed})")
        sub = schema[k]
        if isinstance(sub, dict):
            if not isinstance(v, dict):
                raise RecipeError(path, key, f"expected a mapping, found {type(v).__name__}")
            _check_keys(v, sub, path, key + ".")
        elif sub == "views":
            if not isinstance(v, list):
                raise RecipeError(path, key, f"expected a list of views, found {type(v).__name__}")
            for i, view in enumerate(v):
                if not isinstance(view, dict):
                    raise RecipeError(path, f"{key}[{i}]", "expected a mapping")
                for vk in view:
                    if vk not in _VIEW_KEYS:
                        raise RecipeError(
                            path, f"{key}[{i}].{vk}",
                            f"unknown key (allowed: {', '.join(sorted(_VIEW_KEYS))})",
                        )
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


def _typed(path: Path, key: str, value: Any, typ: Any) -> Any:
    """Check ``value`` against a simple annotation (int/float/bool/str/Optional/Literal)."""
    origin = typing.get_origin(typ)
    args = typing.get_args(typ)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _typed(path, key, value, inner[0])
    if origin is Literal:
        if value not in args:
            raise RecipeError(path, key, f"expected one of {list(args)}, found {value!r}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise RecipeError(path, key, f"expected a list of {len(args)} numbers, found {value!r}")
        return tuple(_typed(path, f"{key}[{i}]", x, a) for i, (x, a) in enumerate(zip(value, args)))
    if typ is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RecipeError(path, key, f"expected a number, found {value!r}")
        return float(value)
    if typ is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RecipeError(path, key, f"expected an integer, found {value!r}")
        return value
    if typ is bool:
        if not isinstance(value, bool):
            raise RecipeError(path, key, f"expected true or false, found {value!r}")
        return value
    if typ is str:
        if not isinstance(value, str):
            raise RecipeError(path, key, f"expected a string, found {value!r}")
        return value
    return value


def _build(cls: type, raw: dict[str, Any], path: Path, prefix: str) -> Any:
    hints = {f.name: f.type for f in dataclasses.fields(cls)}
    resolved = inspect.get_annotations(cls, eval_str=True)
    kwargs = {}
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        if f.name in raw:
            kwargs[f.name] = _typed(path, key, raw[f.name], resolved.get(f.name, hints[f.name]))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise RecipeError(path, key, "missing (required)")
    return cls(**kwargs)


def _build_view(raw: dict[str, Any], path: Path, key: str) -> TextView:
    if "field" not in raw:
        raise RecipeError(path, f"{key}.field", "missing: which sample field this view reads")
    if raw["field"] not in TEXT_FIELDS:
        raise RecipeError(
            path, f"{key}.field",
            f"training samples have no text field {raw['field']!r} "
            f"(they have: {', '.join(TEXT_FIELDS)})",
        )
    if "max_tokens" not in raw:
        raise RecipeError(path, f"{key}.max_tokens", "missing token budget for this view")
    view = _build(TextView, raw, path, key + ".")
    if view.max_tokens < 3:
        raise RecipeError(path, f"{key}.max_tokens", f"expected >= 3 (specials included), found {view.max_tokens}")
    if view.take == "all" and view.count is not None:
        raise RecipeError(path, f"{key}.count", "count is only meaningful with take: random or first")
    if view.take != "all":
        if view.count is None or view.count < 1:
            raise RecipeError(path, f"{key}.count", f"take: {view.take} needs count >= 1")
        if TEXT_FIELDS[view.field] == "one" and view.count != 1:
            raise RecipeError(path, f"{key}.count", f"field {view.field!r} holds one text; count must be 1")
    return view


def build_text_views(raw: dict[str, Any], path: str | os.PathLike, key: str = "text_views") -> TextViews:
    """Validate ``{positives: [...], negatives: [...]}``; errors name ``path`` and ``key``."""
    if not raw.get("positives"):
        raise RecipeError(path, f"{key}.positives", "at least one positive view is required")
    return TextViews(
        positives=tuple(_build_view(v, path, f"{key}.positives[{i}]") for i, v in enumerate(raw["positives"])),
        negatives=tuple(_build_view(v, path, f"{key}.negatives[{i}]")
                        for i, v in enumerate(raw.get("negatives") or [])),
    )


def _check_loss(loss: dict[str, Any], views: TextViews, path: Path) -> None:
    from vlr_plugins.registry import LOSSES

    if not isinstance(loss, dict) or "type" not in loss:
        raise RecipeError(path, "loss.type", "missing: name a registered loss (vlr list losses)")
    if loss["type"] not in LOSSES:
        raise RecipeError(path, "loss.type",
                          f"unknown loss {loss['type']!r}; registered: {', '.join(LOSSES.names())}")
    cls = LOSSES.get(loss["type"])
    params = inspect.signature(cls).parameters
    for k in loss:
        if k != "type" and k not in params:
            raise RecipeError(path, f"loss.{k}",
                              f"{loss['type']} takes no argument {k!r} (it takes: {', '.join(params)})")
    if getattr(cls, "single_positive", False) and views.max_positives != 1:
        raise RecipeError(path, "text_views.positives",
                          f"{loss['type']} expects exactly one positive per image; these views give "
                          f"{views.max_positives or 'several'} (use MultiPositiveInfoNCELoss)")
    if getattr(cls, "requires_negatives", False) and not views.negatives:
        raise RecipeError(path, "text_views.negatives", f"{loss['type']} needs hard-negative views")
    if views.negatives and not getattr(cls, "accepts_negatives", False):
        raise RecipeError(path, "text_views.negatives",
                          f"{loss['type']} ignores hard negatives; use HardNegativeInfoNCELoss")


def recipe_from_dict(raw: dict[str, Any], path: str | os.PathLike | None = None) -> Recipe:
    """Validate a merged recipe mapping (``path`` is used in error messages)."""
    p = Path(path) if path else Path("<recipe>")
    _check_keys(raw, _SCHEMA, p, "")
    for key in ("name", "text_views", "loss", "model"):
        if key not in raw:
            raise RecipeError(p, key, "missing (required)")
    views = build_text_views(raw["text_views"], p)
    _check_loss(raw["loss"], views, p)
    if not isinstance(raw["model"], dict) or "type" not in raw["model"]:
        raise RecipeError(p, "model.type", "missing: name a registered model (vlr list models)")
    data = _build(DataSpec, raw.get("data") or {}, p, "data.")
    if not 0.0 < data.fraction <= 1.0:
        raise RecipeError(p, "data.fraction", f"expected 0 < fraction <= 1, found {data.fraction}")
    train = _build(TrainSpec, raw.get("train") or {}, p, "train.")
    for k in ("batch_size", "epochs"):
        if getattr(train, k) < 1:
            raise RecipeError(p, f"train.{k}", f"expected >= 1, found {getattr(train, k)}")
    splits = tuple(_build(EvalSplit, s, p, f"eval[{i}].") for i, s in enumerate(raw.get("eval") or []))
    return Recipe(
        name=_typed(p, "name", raw["name"], str),
        description=_typed(p, "description", raw.get("description", ""), str),
        reading=_typed(p, "reading", raw.get("reading", ""), str),
        paper=_typed(p, "paper", raw.get("paper", ""), str),
        text_views=views,
        loss=dict(raw["loss"]),
        model=dict(raw["model"]),
        data=data,
        train=train,
        eval=splits,
        source=str(path) if path else None,
    )


def load_recipe(path_or_name: str | os.PathLike, overrides: dict[str, Any] | None = None) -> Recipe:
    """Load and validate a recipe file (or a shipped recipe by name, e.g. ``paragraph/c5``).

    ``overrides`` is a nested mapping merged on top before validation.
    """
    path = find_recipe(path_or_name)
    raw, _ = _load_with_bases(path)
    if overrides:
        _check_keys(overrides, _SCHEMA, Path("<overrides>"), "")
        raw = _merge(raw, overrides)
    return recipe_from_dict(raw, path)


# --------------------------------------------------------------------------- discovery


def recipe_dirs() -> list[Path]:
    """Folders holding shipped recipes: the installed wheel's, else the source tree's."""
    return shipped_dirs("recipes")


def _natural(p: Path) -> list:
    """Sort key putting c2 before c10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.as_posix())]


def list_recipes() -> dict[str, Path]:
    """Shipped recipes by name (``paragraph/c5``), skipping ``_base`` files."""
    out: dict[str, Path] = {}
    for root in recipe_dirs():
        for p in sorted(root.rglob("*.yaml"), key=_natural):
            rel = p.relative_to(root).with_suffix("").as_posix()
            if any(part.startswith("_") for part in rel.split("/")):
                continue
            out.setdefault(rel, p)
    return out


def find_recipe(path_or_name: str | os.PathLike) -> Path:
    p = Path(path_or_name)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return p
    known = list_recipes()
    if str(path_or_name) in known:
        return known[str(path_or_name)]
    raise RecipeError(p, "", f"no such file, and no shipped recipe of that name "
                             f"(shipped: {', '.join(known) or 'none'})")
