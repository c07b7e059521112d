"""Recipes that are MMEngine configs already (``recipes/care/*``): filled in, checked, run.

The text-image recipes (``recipes/paragraph``) are trainer-neutral and turned into an
MMEngine config by :func:`~vlr_plugins.integrations.mmengine.recipe_to_mmengine_config`.
CaRe's and E5-V's MLLM recipes need MMEngine's own vocabulary (FlexibleRunner, DeepSpeed /
FSDP strategies, gradient accumulation) and are written as MMEngine configs with a ``vlr:``
block (name, description, kind). A value left at ``'???'`` is what a run must give, with
``--train`` (the training file: ``train_dataloader.dataset.ann_file``) or ``--set KEY=VALUE``
(dotted MMEngine keys; a mapping value replaces the section); every one left is named
before anything runs, as is mixed precision (``AmpOptimWrapper``) on a machine without a GPU.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from vlr_plugins.errors import ConfigError, UsageError

__all__ = ["NATIVE_KINDS", "is_native_config", "load_native_config", "missing_values"]

#: the ``vlr.kind`` values of MMEngine-native recipes this package trains
NATIVE_KINDS = ("care", "e5v")
_MISSING = "???"


def is_native_config(path: str | os.PathLike) -> bool:
    """``path`` is a YAML MMEngine config with a ``vlr:`` block (not a trainer-neutral recipe)."""
    if not str(path).endswith((".yaml", ".yml")) or not os.path.isfile(path):
        return False
    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False  # the recipe loader reports it
    return isinstance(raw, dict) and isinstance(raw.get("vlr"), dict) and "default_scope" in _with_bases(raw, path)


def _with_bases(raw: dict[str, Any], path: str | os.PathLike, seen: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The top-level keys of ``raw`` and of its ``_base_`` chain, bases of bases included
    (``stage2_released_deepspeed`` -> ``stage2_released`` -> ``_stage2``)."""
    keys = dict(raw)
    bases = raw.get("_base_") or []
    for base in [bases] if isinstance(bases, str) else bases:
        where = os.path.normpath(os.path.join(os.path.dirname(path), str(base)))
        if where in seen:  # a cycle: MMEngine's loader reports it
            continue
        try:
            with open(where, encoding="utf-8") as f:
                parent = yaml.safe_load(f)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if isinstance(parent, dict):
            keys.update(_with_bases(parent, where, seen | {where}))
    return keys


def _leaves(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, Mapping):
        for k, v in node.items():
            yield from _leaves(v, f"{prefix}{k}.")
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            yield from _leaves(v, f"{prefix}{i}.")
    else:
        yield prefix[:-1], node


def missing_values(cfg: Any) -> list[str]:
    """Dotted keys of ``cfg`` still at ``'???'``."""
    return [key for key, value in _leaves(cfg.to_dict()) if value == _MISSING]


def load_native_config(path: str | os.PathLike, *, overrides: Mapping[str, Any], train: str | None,
                       work_dir: str | None) -> tuple[Any, dict[str, Any]]:
    """(the MMEngine ``Config`` of ``path`` with ``overrides`` (dotted keys, from ``--set``) and
    ``train`` (``--train``) applied, its ``vlr`` block). Refuses a kind this package does not
    train and any ``'???'`` left, naming the options that fill them."""
    from mmengine.config import Config

    try:
        cfg = Config.fromfile(str(path))
    except Exception as e:  # MMEngine's parsing errors have no common base
        raise ConfigError(f"{path}: not a readable MMEngine config: {type(e).__name__}: {e}") from None
    vlr = dict(cfg.get("vlr") or {})
    if vlr.get("kind") not in NATIVE_KINDS:
        raise ConfigError(f"{path}: vlr.kind: expected one of {list(NATIVE_KINDS)}, found {vlr.get('kind')!r}")
    if train is not None:
        if not os.path.isfile(train):
            raise UsageError("--train", f"no such file: {train}")
        cfg.merge_from_dict({"train_dataloader.dataset.ann_file": train})
    tree = cfg.to_dict()
    for key in overrides:  # an option of a section that exists
        if not isinstance(_lookup(tree, key.split(".")[:-1]), Mapping):
            raise UsageError("--set", f"{key}: {path} has no section {key.rpartition('.')[0]!r}")
    # a mapping for a section the config lacks adds it; MMEngine would keep its `_delete_` marker
    cfg.merge_from_dict({key: _without_delete(value) if _lookup(tree, key.split(".")) is _ABSENT else value
                         for key, value in overrides.items()})
    left = missing_values(cfg)
    if left:
        hint = "; ".join(f"--set {k}=..." if k != "train_dataloader.dataset.ann_file" else "--train FILE"
                         for k in left)
        raise UsageError("--set", f"{path} leaves {len(left)} value(s) to the run: {', '.join(left)} ({hint})")
    if cfg.get("optim_wrapper", {}).get("type") == "AmpOptimWrapper":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--set", f"{path} trains with AmpOptimWrapper (mixed precision), which needs a GPU; "
                                      "on a CPU give --set 'optim_wrapper={type: OptimWrapper, optimizer: "
                                      "{type: AdamW, lr: ...}}'")
    cfg.work_dir = work_dir or os.path.join("work_dirs", str(vlr.get("name") or os.path.basename(str(path))))
    return cfg, vlr


_ABSENT = object()


def _lookup(tree: Any, parts: list[str]) -> Any:
    """The value at the path ``parts`` of nested mappings ``tree``, or :data:`_ABSENT`."""
    for part in parts:
        if not isinstance(tree, Mapping) or part not in tree:
            return _ABSENT
        tree = tree[part]
    return tree


def _without_delete(value: Any) -> Any:
    return {k: v for k, v in value.items() if k != "_delete_"} if isinstance(value, Mapping) else value
