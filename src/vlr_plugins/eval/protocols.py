"""Per-benchmark token budgets of the papers' protocols, kept as data (protocols.yaml)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib import resources

import yaml

__all__ = ["list_protocols", "token_budgets"]


@cache
def list_protocols() -> dict[str, dict[str, int]]:
    """Every shipped protocol: name -> benchmark -> budget."""
    text = resources.files("vlr_plugins.eval").joinpath("protocols.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def token_budgets(protocol: str | None, overrides: Mapping[str, int] | None = None) -> dict[str, int]:
    """The budgets of ``protocol`` (``None``: none), with ``overrides`` on top."""
    known = list_protocols()
    if protocol is not None and protocol not in known:
        raise KeyError(f"unknown protocol {protocol!r}; known: {', '.join(known)}")
    out = dict(known[protocol]) if protocol else {}
    for name, budget in (overrides or {}).items():
        if not isinstance(budget, int) or budget < 3:
            raise ValueError(f"budget for {name!r} must be an integer >= 3, found {budget!r}")
        out[name] = budget
    return out
