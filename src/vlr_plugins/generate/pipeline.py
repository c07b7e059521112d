"""Pipeline files: which models answer which prompts, with which sampling, in which stages.

A pipeline is a YAML file (the shipped ones in ``recipes/generate/``; docs/generate.md)::

    vlr: {kind: generate, name: paragraph, description: ...}
    pipeline: paragraph          # the record logic: paragraph | mvc
    seed: 0                      # per-record seeds derive from it
    records_per_part: 256        # records per output part (and per batch of work)
    input: {media: image, caption: caption}          # the input records' keys
    roles:                       # one backend per role (openai | transformers | vllm)
      captioner: {backend: openai, model: Qwen/Qwen2-VL-7B-Instruct, base_url: ..., concurrency: 64}
    prompts:                     # template files relative to this file
      positives: {role: captioner, system: prompts/paragraph/preamble.txt,
                  user: prompts/paragraph/positives.txt, items: 5,
                  sampling: {temperature: 0.7, top_p: 0.9, max_tokens: 160}}
    regenerate: {at_or_below: 5, max_attempts: 3}    # paragraph only
    frames: {num_frames: 16, strategy: uniform}      # mvc only

:func:`load_pipeline` checks all of it (template slots included) before anything runs.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vlr_plugins._shipped import shipped_dirs
from vlr_plugins.chat.factory import check_role
from vlr_plugins.errors import ConfigError
from vlr_plugins.generate.mvc_pipeline import MVCPipeline
from vlr_plugins.generate.paragraph_pipeline import ParagraphPipeline
from vlr_plugins.generate.stage import Stage, StepContext
from vlr_plugins.generate.templates import PromptSpec

__all__ = ["PIPELINE_KINDS", "Pipeline", "list_pipelines", "load_pipeline"]

#: the record logic a pipeline file may name
PIPELINE_KINDS: dict[str, Any] = {"paragraph": ParagraphPipeline(), "mvc": MVCPipeline()}
_TOP = ("vlr", "pipeline", "seed", "records_per_part", "input", "roles", "prompts", "regenerate", "frames")
_KIND_OPTIONS = {"paragraph": ("regenerate",), "mvc": ("frames",)}
_INPUT_KEYS = ("media", "caption", "media_root")


@dataclass(frozen=True)
class Pipeline:
    """A checked pipeline file: its ``kind`` (record logic), roles, prompts, options and stages."""

    name: str
    kind: Any
    source: str
    seed: int
    records_per_part: int
    input: dict[str, str]
    roles: dict[str, dict[str, Any]]
    prompts: dict[str, PromptSpec]
    options: dict[str, Any]
    stages: list[Stage]
    raw: dict[str, Any] = field(repr=False)

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise ConfigError(f"no stage {name!r} in pipeline {self.name!r}; its stages: "
                          f"{', '.join(s.name for s in self.stages)}")

    def context(self, stage: Stage) -> StepContext:
        return StepContext(stage=stage.name, prompts=self.prompts, seed=self.seed, options=self.options,
                           models={r: spec["model"] for r, spec in self.roles.items()})

    def fingerprint(self) -> str:
        """SHA-256 of what decides the records: the kind, seed, part size, input keys, the
        prompts' texts, items and sampling, each role's model, the options. Endpoints,
        concurrency and backend types may change between a run and its rerun; these may not."""
        prompts = {n: {"role": p.role, "model": self.roles[p.role]["model"], "user": p.user.text,
                       "system": p.system.text if p.system else None, "items": p.items,
                       "sampling": dict(p.sampling)} for n, p in sorted(self.prompts.items())}
        decisive = {"pipeline": self.kind.name, "seed": self.seed, "records_per_part": self.records_per_part,
                    "input": self.input, "prompts": prompts, "options": self.options}
        return hashlib.sha256(json.dumps(decisive, sort_keys=True).encode("utf-8")).hexdigest()

    def describe(self) -> dict[str, Any]:
        """Plain data for a manifest: models per role (no keys), prompts, stages."""
        return {"name": self.name, "pipeline": self.kind.name, "source": self.source, "seed": self.seed,
                "records_per_part": self.records_per_part, "fingerprint": self.fingerprint(),
                "roles": {r: {k: v for k, v in spec.items() if k in ("backend", "model", "base_url")}
                          for r, spec in self.roles.items()},
                "stages": [{"name": s.name, "role": s.role} for s in self.stages], "options": self.options}


def list_pipelines() -> dict[str, Path]:
    """The shipped pipeline files by name (``paragraph``, ``mvc``)."""
    out: dict[str, Path] = {}
    for root in shipped_dirs("recipes"):
        for p in sorted((root / "generate").glob("*.yaml")):
            if not p.name.startswith("_"):
                out.setdefault(p.stem, p)
    return out


def _find(name_or_path: str | os.PathLike[str]) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise ConfigError(f"{p}: no such pipeline file")
        return p
    shipped = list_pipelines()
    name = str(name_or_path).removeprefix("generate/")
    if name not in shipped:
        raise ConfigError(f"no pipeline named {str(name_or_path)!r} and no such file; shipped: "
                          f"{', '.join(sorted(shipped))}")
    return shipped[name]


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def load_pipeline(name_or_path: str | os.PathLike[str], overrides: Mapping[str, Any] | None = None) -> Pipeline:
    """A shipped pipeline by name, or a pipeline file, with ``overrides`` (a nested mapping,
    e.g. from ``--set roles.captioner.base_url=...``) merged over it, checked whole.
    Errors name the file (and ``--set`` when overrides were given) and the key."""
    path = _find(name_or_path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a pipeline file holds a mapping, found {type(raw).__name__}")
    file_roles = raw.get("roles")
    raw = _merge(raw, overrides or {})
    where = f"{path}{' (with --set)' if overrides else ''}"
    _refuse_unknown_roles(overrides, file_roles, raw, where)
    unknown = sorted(set(raw) - set(_TOP))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(_TOP)})")
    kind_name = raw.get("pipeline")
    if kind_name not in PIPELINE_KINDS:
        raise ConfigError(f"{where}: pipeline: expected one of {', '.join(PIPELINE_KINDS)}, found {kind_name!r}")
    kind = PIPELINE_KINDS[kind_name]
    foreign = sorted(k for k in raw if k in sum(_KIND_OPTIONS.values(), ()) and k not in _KIND_OPTIONS[kind_name])
    if foreign:
        raise ConfigError(f"{where}: {foreign[0]}: not an option of a {kind_name} pipeline")
    seed, per_part = raw.get("seed", 0), raw.get("records_per_part", 256)
    for key, value, low in (("seed", seed, 0), ("records_per_part", per_part, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"{where}: {key}: expected an integer >= {low}, found {value!r}")
    keys = raw.get("input") or {}
    if not isinstance(keys, Mapping) or set(keys) - set(_INPUT_KEYS) or not all(isinstance(v, str) for v in keys.values()):
        raise ConfigError(f"{where}: input: expected a mapping of {', '.join(_INPUT_KEYS)} to key names, found {keys!r}")
    roles_raw = raw.get("roles")
    if not isinstance(roles_raw, Mapping) or not roles_raw:
        raise ConfigError(f"{where}: roles: expected a mapping of role names to backends, found {roles_raw!r}")
    roles = {str(r): check_role(spec, f"{where}: roles.{r}") for r, spec in roles_raw.items()}
    prompts = _prompts(raw.get("prompts"), kind, roles, path.parent, where)
    options = kind.check_options({k: raw[k] for k in _KIND_OPTIONS[kind_name] if k in raw}, where)
    try:
        stages = kind.stages(options, prompts)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    vlr = raw.get("vlr") or {}
    name = str(vlr.get("name") or path.stem) if isinstance(vlr, Mapping) else path.stem
    return Pipeline(name=name, kind=kind, source=str(path), seed=seed, records_per_part=per_part, input=dict(keys),
                    roles=roles, prompts=prompts, options=options, stages=stages, raw=raw)


def _refuse_unknown_roles(overrides: Mapping[str, Any] | None, file_roles: Any, raw: Mapping[str, Any],
                          where: str) -> None:
    """A role that ``--set`` names but the file lacks is a typo (``roles.captionr.base_url=...``),
    unless a prompt is set to use it (a role added on purpose): refused, naming the close ones."""
    given = (overrides or {}).get("roles")
    if not isinstance(given, Mapping) or not isinstance(file_roles, Mapping):
        return
    prompts = raw.get("prompts")
    prompts = prompts if isinstance(prompts, Mapping) else {}
    used = {p.get("role") for p in prompts.values() if isinstance(p, Mapping)}
    for name in given:
        if name in file_roles or name in used:
            continue
        known = [str(r) for r in file_roles]
        close = difflib.get_close_matches(str(name), known, n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise ConfigError(f"{where}: roles.{name}: unknown role (the pipeline's roles: {', '.join(known)}; a new "
                          f"role needs a prompt that uses it){hint}")


def _prompts(raw: Any, kind: Any, roles: Mapping[str, Any], folder: Path, where: str) -> dict[str, PromptSpec]:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: prompts: expected a mapping with {', '.join(kind.prompt_slots)}, found {raw!r}")
    missing = [p for p in kind.prompt_slots if p not in raw]
    unknown = sorted(set(raw) - set(kind.prompt_slots))
    if missing or unknown:
        problem = f"missing {missing[0]!r}" if missing else f"unknown prompt {unknown[0]!r}"
        raise ConfigError(f"{where}: prompts: {problem} (a {kind.name} pipeline has "
                          f"{', '.join(kind.prompt_slots)})")
    out = {}
    for name, (allowed, required) in kind.prompt_slots.items():
        spec = PromptSpec.from_mapping(name, raw[name], folder, f"{where}: prompts.{name}")
        if spec.role not in roles:
            raise ConfigError(f"{where}: prompts.{name}.role: no role {spec.role!r} (roles: {', '.join(roles)})")
        for template in (spec.system, spec.user):
            if template is not None:
                template.check_slots(allowed, required if template is spec.user else set())
        if name in kind.list_prompts and spec.items is None:
            raise ConfigError(f"{where}: prompts.{name}.items: a list prompt needs the number of items it asks for")
        out[name] = spec
    return out
