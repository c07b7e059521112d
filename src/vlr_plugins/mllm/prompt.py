"""EOL prompts as data: the "summarize it in one word" prompts whose last-token state is the embedding.

An explicit one-word limitation (EOL) prompt asks the model to summarise a sentence, an
image or a video in one word; the last layer's hidden state at the prompt's last token is
the embedding (E5-V; CaRe, CaReBench paper sec. 4.2). Each prompt family is a YAML file:
the shipped ones live in ``prompt_templates/`` beside this module (``list_eol_prompts()``),
and a user adds one by giving the path of their own file.

A file holds::

    name: care                     # how it is listed
    description: ...               # one line
    chat_template: true            # wrap in the model's chat template + generation prompt
    strip: false                   # str.strip() the rendered prompt (CaReBench's trainer does)
    text:  "<sent>\\nSummary above sentence in one word:"     # <sent>: the sentence
    image: "<image>\\nSummary above image in one word:"       # <image>: where the image goes
    video: "<video>\\nSummary above video in one word:"       # <video>: where the clip goes
    video_input: {num_frames: 32, strategy: uniform, frame_repeat: 2, max_pixels: 230400}

With ``chat_template: true`` the prompt is the content of one user turn: a prompt without
media is passed as a string, one with media as a list of parts (``{"type": "video"}``,
``{"type": "text", ...}``), so the model's own chat template writes its vision
placeholders. With ``false`` the prompt is the whole input as written, ``<image>`` and
``<video>`` replaced by the processor's image and video tokens. ``<sent>`` is replaced by
the sentence after rendering (as CaReBench and E5-V do).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from vlr_plugins.errors import ConfigError
from vlr_plugins.mllm.media_input import VideoInput

__all__ = ["MODALITIES", "EOLPrompt", "load_eol_prompt", "list_eol_prompts", "truncate_sentences"]

MODALITIES = ("text", "image", "video")
SENTENCE = "<sent>"
_MEDIA = {"image": "<image>", "video": "<video>"}
_KEYS = {"name", "description", "chat_template", "strip", *MODALITIES, "video_input"}
_FOLDER = "prompt_templates"

#: renders a chat: ``(messages, add_generation_prompt=True) -> str``
ChatRenderer = Callable[[list[dict[str, Any]]], str]


@dataclass(frozen=True)
class EOLPrompt:
    """One family of EOL prompts (text, image, video), read from a YAML file.

    Attributes: ``text`` / ``image`` / ``video`` are the prompts (``None``: the family has
    none for that modality); ``chat_template`` and ``strip`` say how they are rendered
    (module docstring); ``video_input`` says how clips reach the processor; ``source`` is
    the file it was read from.

    Example::

        prompt = load_eol_prompt("care")
        prompt.render("text", chat=tokenizer_chat, sentence="A dog runs.")
    """

    name: str
    text: str | None = None
    image: str | None = None
    video: str | None = None
    chat_template: bool = True
    strip: bool = False
    description: str = ""
    video_input: VideoInput = field(default_factory=VideoInput)
    source: str = ""

    def template(self, modality: str) -> str:
        """The prompt for ``modality``, or a ``ConfigError`` naming the file when it has none."""
        if modality not in MODALITIES:
            raise ValueError(f"modality must be one of {MODALITIES}, found {modality!r}")
        value = getattr(self, modality)
        if value is None:
            have = [m for m in MODALITIES if getattr(self, m) is not None]
            raise ConfigError(f"EOL prompt {self.name!r} ({self.source or 'built in code'}) has no "
                              f"{modality} prompt; it has: {', '.join(have)}")
        return value

    def render(self, modality: str, *, chat: ChatRenderer | None, sentence: str = "",
               media_tokens: Mapping[str, str] | None = None) -> str:
        """The full input string for one item of ``modality``.

        ``chat`` renders a list of messages with the generation prompt (a tokenizer's or a
        processor's ``apply_chat_template``; needed when ``chat_template`` is true);
        ``sentence`` replaces ``<sent>``; ``media_tokens`` (``{"image": "<|image_pad|>"}``)
        replace the media placeholders when the prompt is used as written.
        """
        return self.render_texts([sentence], chat=chat, modality=modality, media_tokens=media_tokens)[0]

    def render_texts(self, sentences: Sequence[str], *, chat: ChatRenderer | None, modality: str = "text",
                     media_tokens: Mapping[str, str] | None = None) -> list[str]:
        """:meth:`render` for many sentences, with the chat template rendered once (as
        CaReBench does: the template holds ``<sent>``, replaced afterwards)."""
        template = self.template(modality)
        if self.chat_template:
            if chat is None:
                raise ConfigError(f"EOL prompt {self.name!r} is written for the model's chat template, "
                                  f"but the model has none (use a prompt with chat_template: false)")
            rendered = chat([{"role": "user", "content": _content(template)}])
        else:
            rendered = template
            for kind, placeholder in _MEDIA.items():
                if placeholder in rendered:
                    token = (media_tokens or {}).get(kind)
                    if token is None:
                        raise ConfigError(f"EOL prompt {self.name!r}: the processor names no {kind} token "
                                          f"to put in place of {placeholder}")
                    rendered = rendered.replace(placeholder, token)
        filled = [rendered.replace(SENTENCE, s) for s in sentences]
        return [f.strip() for f in filled] if self.strip else filled


def truncate_sentences(tokenizer: Any, sentences: Sequence[str], max_tokens: int | None) -> list[str]:
    """Each sentence cut to ``max_tokens`` tokens and decoded back, as E5-V's and CaReBench's
    trainers cut theirs (``cutoff_len``, 32) before filling the prompt; ``None``: unchanged."""
    if max_tokens is None:
        return list(sentences)
    ids = tokenizer(list(sentences), add_special_tokens=False, truncation=True, max_length=max_tokens)["input_ids"]
    return [tokenizer.decode(row) for row in ids]


def _content(template: str) -> str | list[dict[str, str]]:
    """One user turn's content: the string itself without media, else parts in order."""
    if not any(p in template for p in _MEDIA.values()):
        return template
    parts: list[dict[str, str]] = []
    rest = template
    while rest:
        hits = [(rest.find(p), kind) for kind, p in _MEDIA.items() if p in rest]
        if not hits:
            parts.append({"type": "text", "text": rest})
            break
        at, kind = min(hits)
        if at:
            parts.append({"type": "text", "text": rest[:at]})
        parts.append({"type": kind})
        rest = rest[at + len(_MEDIA[kind]):]
    return parts


def _shipped() -> dict[str, Path]:
    folder = resources.files("vlr_plugins.mllm") / _FOLDER
    return {Path(str(p)).stem: Path(str(p)) for p in folder.iterdir() if str(p).endswith(".yaml")}


def list_eol_prompts() -> dict[str, str]:
    """The shipped EOL prompt families: ``{name: description}``."""
    return {name: load_eol_prompt(name).description for name in sorted(_shipped())}


def _check(raw: Any, path: Path) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: an EOL prompt file holds a mapping, found {type(raw).__name__}")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]!r}; expected some of {sorted(_KEYS)}")
    if not isinstance(raw.get("name"), str) or not raw["name"]:
        raise ConfigError(f"{path}, key 'name': expected a non-empty string, found {raw.get('name')!r}")
    for key in MODALITIES:
        value = raw.get(key)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{path}, key {key!r}: expected a string, found {type(value).__name__}")
    if all(raw.get(m) is None for m in MODALITIES):
        raise ConfigError(f"{path}: needs at least one of {MODALITIES}")
    if raw.get("text") is not None and SENTENCE not in raw["text"]:
        raise ConfigError(f"{path}, key 'text': the text prompt must hold {SENTENCE} (where the sentence goes)")
    for kind, placeholder in _MEDIA.items():
        if raw.get(kind) is not None and placeholder not in raw[kind]:
            raise ConfigError(f"{path}, key {kind!r}: the {kind} prompt must hold {placeholder}")
    for key in ("chat_template", "strip"):
        if key in raw and not isinstance(raw[key], bool):
            raise ConfigError(f"{path}, key {key!r}: expected true or false, found {raw[key]!r}")
    return raw


def load_eol_prompt(name_or_path: str | os.PathLike[str] | EOLPrompt) -> EOLPrompt:
    """A shipped EOL prompt family by name (``"care"``, ``"e5v"``), or one read from a YAML
    file (a path ending in ``.yaml`` / ``.yml``, or any existing file). An
    :class:`EOLPrompt` is returned as is."""
    if isinstance(name_or_path, EOLPrompt):
        return name_or_path
    p = Path(name_or_path)
    shipped = _shipped()
    if p.suffix not in (".yaml", ".yml") and not p.exists():
        if str(name_or_path) not in shipped:
            raise ConfigError(f"no EOL prompt named {str(name_or_path)!r} and no such file; "
                              f"shipped: {', '.join(sorted(shipped))}")
        p = shipped[str(name_or_path)]
    try:
        with open(p, encoding="utf-8") as f:
            raw = _check(yaml.safe_load(f), p)
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such EOL prompt file") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from None
    try:
        video_input = VideoInput(**raw.pop("video_input", None) or {})
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{p}, key 'video_input': {e}") from None
    return EOLPrompt(video_input=video_input, source=str(p), **raw)
