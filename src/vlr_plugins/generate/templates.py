"""Prompt templates as text files, and the prompts of a pipeline built from them.

A template is a UTF-8 text file whose ``{name}`` slots (lowercase letters, digits and
``_``) are filled at generation time; no other brace is special. A :class:`PromptSpec`
says which role (model) answers a prompt, its system and user templates, how the
record's media is placed, the sampling and, for a list prompt, how many items it asks for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlr_plugins.errors import ConfigError

__all__ = ["PromptTemplate", "PromptSpec", "SAMPLING_KEYS"]

_SLOT = re.compile(r"\{([a-z][a-z0-9_]*)\}")
#: sampling parameters a pipeline may set, by their OpenAI names (``max_tokens`` is the
#: number of new tokens; temperature 0 is greedy decoding)
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "max_tokens", "repetition_penalty", "presence_penalty",
                 "frequency_penalty", "stop")
_SPEC_KEYS = ("role", "system", "user", "items", "sampling")


@dataclass(frozen=True)
class PromptTemplate:
    """One template: its ``text`` and the ``source`` file it came from (for error messages)."""

    text: str
    source: str = "built in code"

    @classmethod
    def read(cls, path: str | Path) -> PromptTemplate:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"{p}: no such prompt template") from None
        except UnicodeDecodeError as e:
            raise ConfigError(f"{p}: a prompt template must be UTF-8 text ({e.reason} at byte {e.start})") from None
        if text.endswith("\n"):
            text = text[:-1]  # the file's last newline is the editor's, not the prompt's
        if not text.strip():
            raise ConfigError(f"{p}: the prompt template is empty")
        return cls(text, str(p))

    @property
    def slots(self) -> frozenset[str]:
        """The slot names the template holds."""
        return frozenset(_SLOT.findall(self.text))

    def check_slots(self, allowed: frozenset[str] | set[str], required: frozenset[str] | set[str] = frozenset()) -> None:
        """Refuse a slot the pipeline does not fill, or a missing one it needs (naming the file)."""
        unknown = sorted(self.slots - set(allowed))
        if unknown:
            raise ConfigError(f"{self.source}: unknown slot {{{unknown[0]}}}; this prompt can use "
                              f"{', '.join('{' + s + '}' for s in sorted(allowed)) or 'no slot'}")
        missing = sorted(set(required) - self.slots)
        if missing:
            raise ConfigError(f"{self.source}: the prompt needs the slot {{{missing[0]}}} (where the "
                              f"pipeline puts the {missing[0].replace('_', ' ')})")

    def fill(self, **values: str) -> str:
        """The text with every slot replaced; a slot without a value is a ``KeyError``."""
        return _SLOT.sub(lambda m: values[m.group(1)], self.text)


@dataclass(frozen=True)
class PromptSpec:
    """One prompt of a pipeline: who answers it and how it is asked.

    ``role``: the key of the pipeline's ``roles`` (the model); ``system`` / ``user``: the
    templates (``system`` may be ``None``); the record's media goes at the start of the
    user turn, before its text (Qwen2-VL's and Llama 3.2 Vision's order); ``items``: the
    number of list items asked for (``None`` for free text or a score); ``sampling``: sent
    with every request of this prompt (OpenAI names, :data:`SAMPLING_KEYS`).
    """

    name: str
    role: str
    user: PromptTemplate
    system: PromptTemplate | None = None
    items: int | None = None
    sampling: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, name: str, raw: Any, folder: Path, where: str) -> PromptSpec:
        """A spec from a pipeline file's ``prompts.<name>`` mapping; template paths are
        relative to ``folder`` (the pipeline file's); errors name ``where`` and the key."""
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{where}: expected a mapping with {', '.join(_SPEC_KEYS)}, "
                              f"found {type(raw).__name__}")
        unknown = sorted(set(raw) - set(_SPEC_KEYS))
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(_SPEC_KEYS)})")
        for key in ("role", "user"):
            if not isinstance(raw.get(key), str) or not raw[key].strip():
                raise ConfigError(f"{where}.{key}: expected a string, found {raw.get(key)!r}")
        if raw.get("system") is not None and not isinstance(raw["system"], str):
            raise ConfigError(f"{where}.system: expected a template file name, found {raw['system']!r}")
        items = raw.get("items")
        if items is not None and (not isinstance(items, int) or isinstance(items, bool) or items < 1):
            raise ConfigError(f"{where}.items: expected an integer >= 1, found {items!r}")
        sampling = raw.get("sampling") or {}
        if not isinstance(sampling, Mapping):
            raise ConfigError(f"{where}.sampling: expected a mapping, found {type(sampling).__name__}")
        bad = sorted(set(sampling) - set(SAMPLING_KEYS))
        if bad:
            raise ConfigError(f"{where}.sampling: unknown parameter {bad[0]!r} (known: {', '.join(SAMPLING_KEYS)}; "
                              "the per-record seed is set by the pipeline)")
        for key in ("temperature", "top_p"):
            value = sampling.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
                raise ConfigError(f"{where}.sampling.{key}: expected a number >= 0, found {value!r}")
        tokens = sampling.get("max_tokens")
        if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
            raise ConfigError(f"{where}.sampling.max_tokens: expected an integer >= 1, found {tokens!r}")
        system = PromptTemplate.read(folder / raw["system"]) if raw.get("system") else None
        return cls(name=name, role=raw["role"], user=PromptTemplate.read(folder / raw["user"]), system=system,
                   items=items, sampling=dict(sampling))

    def messages(self, media: list[dict[str, Any]], **values: str) -> list[dict[str, Any]]:
        """The chat messages of one request: the system turn (if any), then the user turn
        holding ``media`` parts and the filled user template."""
        out: list[dict[str, Any]] = []
        if self.system is not None:
            out.append({"role": "system", "content": self.system.fill(**values)})
        out.append({"role": "user", "content": [*media, {"type": "text", "text": self.user.fill(**values)}]})
        return out

    def describe(self) -> dict[str, Any]:
        return {"role": self.role, "system": self.system.source if self.system else None,
                "user": self.user.source, "items": self.items, "sampling": dict(self.sampling)}
