"""Named, listable plug-ins (timm-style): one decorator next to each definition.

Every loss, model, reader and metric of the package registers itself in one of the
registries below, so ``vlr list`` can show it and configs can name it. The registries
are framework-free; the MMEngine / LAVIS / open_clip integrations copy entries into
their own registries.
"""

from __future__ import annotations

import fnmatch
import importlib
import inspect
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["Entry", "Registry", "LOSSES", "MODELS", "READERS", "METRICS", "all_registries", "index_of", "INDEX"]

# what ``vlr list`` shows without importing the entries (torch, transformers): every shipped
# entry's name, description and module, written by ``python -m vlr_plugins.registry`` and
# checked against the registries themselves by tests/test_registry.py
INDEX = Path(__file__).with_name("_registry_index.json")


@dataclass(frozen=True)
class Entry:
    name: str
    obj: Any
    description: str
    module: str


def _singular(kind: str) -> str:
    """One entry of a registry ``kind``: losses -> loss, models -> model, metrics -> metric."""
    if kind.endswith(("sses", "shes", "ches", "xes")):
        return kind[:-2]
    return kind[:-1] if kind.endswith("s") else kind


def _first_doc_line(obj: Any) -> str:
    """The docstring's first paragraph on one line (a summary may wrap)."""
    doc = (inspect.getdoc(obj) or "").strip()
    return " ".join(doc.split("\n\n", 1)[0].split())


class Registry:
    """A name -> object table.

    Registration is idempotent (the same object under the same name is a no-op) and
    refuses to silently replace a different object: that raises ``KeyError`` naming
    both definitions, unless ``force=True``.
    """

    def __init__(self, kind: str, modules: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self._entries: dict[str, Entry] = {}
        self._modules = modules  # imported on first lookup so that entries exist

    def register(
        self,
        obj: T | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
        force: bool = False,
    ) -> T | Callable[[T], T]:
        def _do(o: T) -> T:
            key = name or getattr(o, "__name__", None)
            if not key:
                raise ValueError(f"cannot register {o!r} in {self.kind}: give it a name")
            module = getattr(o, "__module__", "?")
            old = self._entries.get(key)
            if old is not None and old.obj is not o and not force:
                if (old.module, getattr(old.obj, "__qualname__", None)) == (
                    module,
                    getattr(o, "__qualname__", None),
                ):
                    # the same definition re-executed (module reload): keep the newest
                    pass
                else:
                    raise KeyError(
                        f"{self.kind} already has {key!r} (from {old.module}); "
                        f"refusing to replace it with the one from {module} (force=True overrides)"
                    )
            self._entries[key] = Entry(key, o, description or _first_doc_line(o), module)
            return o

        return _do(obj) if obj is not None else _do

    def _load(self) -> None:
        for m in self._modules:
            importlib.import_module(m)

    def summaries(self, pattern: str = "*") -> list[Entry]:
        """The entries matching ``pattern`` for a listing, each with ``obj=None``: from the shipped
        index (:data:`INDEX`) while the registering modules are not imported yet, so a listing
        imports no torch; from the registry itself once they are (entries registered since,
        by a user's module, included)."""
        if all(m in sys.modules for m in self._modules) or not INDEX.is_file():
            return [Entry(e.name, None, e.description, e.module) for e in self.entries(pattern)]
        with open(INDEX, encoding="utf-8") as f:
            rows = {r["name"]: r for r in json.load(f).get(self.kind, [])}
        for name, e in self._entries.items():  # registered since the index was written (a user's module)
            rows.setdefault(name, {"name": name, "description": e.description, "module": e.module})
        return [Entry(name, None, rows[name]["description"], rows[name]["module"])
                for name in sorted(rows) if fnmatch.fnmatch(name, pattern)]

    def get(self, name: str) -> Any:
        self._load()
        try:
            return self._entries[name].obj
        except KeyError:
            known = ", ".join(sorted(self._entries)) or "none"
            raise KeyError(f"no {_singular(self.kind)} named {name!r}; known: {known}") from None

    def build(self, cfg: dict[str, Any]) -> Any:
        """Build ``cfg['type'](**rest)``; ``cfg`` is not modified."""
        if "type" not in cfg:
            raise KeyError(f"a {_singular(self.kind)} config needs a 'type' key, got keys {sorted(cfg)}")
        rest = {k: v for k, v in cfg.items() if k != "type"}
        return self.get(cfg["type"])(**rest)

    def entries(self, pattern: str = "*") -> list[Entry]:
        self._load()
        return [e for k, e in sorted(self._entries.items()) if fnmatch.fnmatch(k, pattern)]

    def names(self, pattern: str = "*") -> list[str]:
        return [e.name for e in self.entries(pattern)]

    def __contains__(self, name: str) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._entries)} entries)"


# the modules that register entries (the text, data, eval and mllm packages import their modules
# on first use, so the modules themselves are named; tests/test_registry.py checks the lists against the source)
LOSSES = Registry("losses", ("vlr_plugins.losses",))
MODELS = Registry("models", ("vlr_plugins.text.blip_text_encoder", "vlr_plugins.text.dual_cls", "vlr_plugins.vision",
                             "vlr_plugins.mllm.embedder"))
READERS = Registry("readers", ("vlr_plugins.data.sample", "vlr_plugins.data.mvc_samples", "vlr_plugins.data.nli",
                               "vlr_plugins.data.retrieval_set", "vlr_plugins.data.video_captions",
                               "vlr_plugins.data.readers"))
METRICS = Registry("metrics", ("vlr_plugins.eval.retrieval", "vlr_plugins.eval.retrieval_bias"))


def all_registries() -> dict[str, Registry]:
    return {r.kind: r for r in (LOSSES, MODELS, READERS, METRICS)}


def index_of(registries: dict[str, Registry]) -> dict[str, list[dict[str, str]]]:
    """``{kind: [{name, description, module}, ...]}`` of every entry, sorted by name: :data:`INDEX`."""
    return {kind: [{"name": e.name, "description": e.description, "module": e.module} for e in reg.entries()]
            for kind, reg in registries.items()}


def _write_index() -> None:
    from vlr_plugins._io import atomic_write_text
    from vlr_plugins.registry import INDEX as index, all_registries as registries  # the package's own module

    atomic_write_text(index, json.dumps(index_of(registries()), indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {index}")


if __name__ == "__main__":
    _write_index()
