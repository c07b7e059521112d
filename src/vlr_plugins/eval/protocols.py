"""The papers' evaluation protocols, kept as data (protocols.yaml): per benchmark, the token
budget of its texts, the frames its videos are embedded from, and the text view.

A protocol is read once and checked whole; :func:`check_store_sampling` compares what a
video store records (``meta``: ``frames``, ``sampler``) with what a protocol asks for.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from vlr_plugins.data.video.sampling import FRAME_STRATEGIES
from vlr_plugins.errors import ConfigError

__all__ = [
    "STORE_FRAMES_KEY",
    "STORE_SAMPLER_KEY",
    "TEXT_VIEWS",
    "BenchmarkProtocol",
    "check_store_sampling",
    "list_protocols",
    "protocol_entries",
    "token_budgets",
]

#: The views of a multi-view (dual-CLS) text encoder a protocol may ask for.
TEXT_VIEWS = ("summary", "detailed")
#: The keys of a store's ``meta`` (its ``index.json``) that say how its videos were sampled.
STORE_FRAMES_KEY, STORE_SAMPLER_KEY = "frames", "sampler"

_MIN_TOKENS = 3  # [CLS] and [SEP] take 2
# samplers that pick the same frames (data/video/sampling.py: CaReBench's `uniform` is UMT's `middle`)
_SAME_FRAMES = {"uniform": "middle"}


@dataclass(frozen=True)
class BenchmarkProtocol:
    """How one benchmark is evaluated under a protocol; every field optional.

    ``max_tokens``: the token budget of its texts (special tokens included), for text
    encoders that take one; ``frames`` and ``sampler``: how many frames of each video, and
    which (a :data:`~vlr_plugins.data.video.FRAME_STRATEGIES` name), the item embeddings
    must come from; ``text_view``: ``"summary"`` or ``"detailed"``, the view of a
    multi-view text encoder to encode the texts with.
    """

    max_tokens: int | None = None
    frames: int | None = None
    sampler: str | None = None
    text_view: str | None = None


def _entry(where: str, raw: Any) -> BenchmarkProtocol:
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = {"max_tokens": raw}
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a token budget or a mapping of max_tokens, frames, sampler, "
                         f"text_view, found {raw!r}")
    unknown = sorted(set(raw) - set(BenchmarkProtocol.__dataclass_fields__))
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (allowed: max_tokens, frames, sampler, text_view)")
    entry = BenchmarkProtocol(**raw)
    for key, low in (("max_tokens", _MIN_TOKENS), ("frames", 1)):
        value = getattr(entry, key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
            raise ValueError(f"{where}, {key}: expected an integer >= {low}, found {value!r}")
    if entry.sampler is not None and entry.sampler not in FRAME_STRATEGIES:
        raise ValueError(f"{where}, sampler: expected one of {', '.join(FRAME_STRATEGIES)}, found {entry.sampler!r}")
    if entry.text_view is not None and entry.text_view not in TEXT_VIEWS:
        raise ValueError(f"{where}, text_view: expected one of {', '.join(TEXT_VIEWS)}, found {entry.text_view!r}")
    return entry


@cache
def list_protocols() -> dict[str, dict[str, BenchmarkProtocol]]:
    """Every shipped protocol: name -> benchmark -> :class:`BenchmarkProtocol`.

    Read from ``protocols.yaml`` once and checked whole: a malformed entry is a
    ``ValueError`` naming the protocol, the benchmark and the key.
    """
    text = resources.files("vlr_plugins.eval").joinpath("protocols.yaml").read_text(encoding="utf-8")
    raw = yaml.safe_load(text)
    return {name: {bench: _entry(f"protocols.yaml, protocol {name!r}, benchmark {bench!r}", entry)
                   for bench, entry in benchmarks.items()}
            for name, benchmarks in raw.items()}


def protocol_entries(protocol: str | None) -> dict[str, BenchmarkProtocol]:
    """The entries of ``protocol`` by benchmark name (``None``: no protocol, none)."""
    known = list_protocols()
    if protocol is not None and protocol not in known:
        raise KeyError(f"unknown protocol {protocol!r}; known: {', '.join(known)}")
    return dict(known[protocol]) if protocol else {}


def token_budgets(protocol: str | None, overrides: Mapping[str, int] | None = None) -> dict[str, int]:
    """The budgets of ``protocol`` (``None``: none), with ``overrides`` on top."""
    out = {name: e.max_tokens for name, e in protocol_entries(protocol).items() if e.max_tokens is not None}
    for name, budget in (overrides or {}).items():
        if not isinstance(budget, int) or budget < _MIN_TOKENS:
            raise ValueError(f"budget for {name!r} must be an integer >= {_MIN_TOKENS}, found {budget!r}")
        out[name] = budget
    return out


def _described(frames: Any, sampler: Any) -> str:
    return f"{frames if frames is not None else '?'} frames, sampler {sampler if sampler is not None else '?'}"


def check_store_sampling(meta: Mapping[str, Any], entry: BenchmarkProtocol | None, *, store: str | os.PathLike,
                         where: str, protocol: str | None) -> str | None:
    """Check that a video store was embedded from the frames ``entry`` asks for.

    ``meta``: the store's ``meta`` (``EmbeddingStore.meta``), where ``vlr precompute
    --videos`` records ``frames`` (an int) and ``sampler`` (a strategy name). Samplers that
    pick the same frames agree (``uniform`` is ``middle``). A mismatch is a
    :class:`~vlr_plugins.errors.ConfigError` naming ``where`` (the benchmark), the store,
    both settings and the protocol; a malformed value one naming ``meta.frames`` or
    ``meta.sampler``. A store that records neither (an older or image store) cannot be
    checked: the returned string says so, for the caller to show as a warning; ``None``
    otherwise (checked, or nothing to check).
    """
    if entry is None or (entry.frames is None and entry.sampler is None):
        return None
    frames, sampler = meta.get(STORE_FRAMES_KEY), meta.get(STORE_SAMPLER_KEY)
    index = os.path.join(os.fspath(store), "index.json")
    if frames is not None and (isinstance(frames, bool) or not isinstance(frames, int) or frames < 1):
        raise ConfigError(f"{index}, field 'meta.{STORE_FRAMES_KEY}': expected a frame count >= 1, found {frames!r}")
    if sampler is not None and sampler not in FRAME_STRATEGIES:
        raise ConfigError(f"{index}, field 'meta.{STORE_SAMPLER_KEY}': expected one of "
                          f"{', '.join(FRAME_STRATEGIES)}, found {sampler!r}")
    wanted = _described(entry.frames, entry.sampler)
    if (entry.frames is not None and frames is not None and frames != entry.frames) or (
            entry.sampler is not None and sampler is not None
            and _SAME_FRAMES.get(sampler, sampler) != _SAME_FRAMES.get(entry.sampler, entry.sampler)):
        raise ConfigError(f"{where}: the embedding store {os.fspath(store)} holds videos embedded from "
                          f"{_described(frames, sampler)}, but protocol {protocol} evaluates this benchmark on "
                          f"{wanted}: embed its videos again with those frames, or choose another --protocol")
    missing = [key for key, have, want in ((STORE_FRAMES_KEY, frames, entry.frames),
                                           (STORE_SAMPLER_KEY, sampler, entry.sampler))
               if have is None and want is not None]
    if missing:
        return (f"{where}: the embedding store {os.fspath(store)} does not record its {' and '.join(missing)} "
                f"(meta in its index.json), so it cannot be checked against protocol {protocol} ({wanted})")
    return None
