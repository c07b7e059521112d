"""Guarded registration into ``lavis.common.registry``.

LAVIS' ``register_*`` decorators raise ``KeyError`` when a name is taken, so importing
the plugin twice (``importlib.reload``, a second import path) would fail. Here the same
definition re-registered is a no-op (the newest class object is kept), while a name held
by somebody else's class is still refused, naming both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from lavis.common.registry import registry

T = TypeVar("T")

__all__ = ["register", "KINDS"]

# kind -> (mapping key in registry.mapping, LAVIS' decorator factory)
KINDS: dict[str, tuple[str, Callable]] = {
    "model": ("model_name_mapping", registry.register_model),
    "builder": ("builder_name_mapping", registry.register_builder),
    "task": ("task_name_mapping", registry.register_task),
    "processor": ("processor_name_mapping", registry.register_processor),
}


def _where(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def register(kind: str, name: str) -> Callable[[T], T]:
    """Decorator: register ``cls`` as LAVIS ``kind`` (model, builder, task, processor) ``name``."""
    mapping_key, lavis_register = KINDS[kind]

    def wrap(cls: T) -> T:
        mapping = registry.mapping[mapping_key]
        old = mapping.get(name)
        if old is None:
            return lavis_register(name)(cls)  # LAVIS' own checks (base class) apply
        if old is cls or _where(old) == _where(cls):
            mapping[name] = cls  # the same definition executed again (reload)
            return cls
        raise KeyError(f"LAVIS already has a {kind} named {name!r} ({_where(old)}); "
                       f"vlr_plugins will not replace it with {_where(cls)}")

    return wrap
