"""Captioning settings as data: the prompt, the frames a model sees and the generation arguments.

A settings file (YAML) holds::

    name: carebench
    description: one line
    prompt: "Describe the video in detail."
    video_input: {num_frames: 32, strategy: uniform, frame_repeat: 1, max_pixels: 230400}
    generation: {max_new_tokens: 1024, do_sample: false}     # transformers' generate() arguments

Shipped: ``carebench`` (CaReBench Table 2) and ``care_stage1`` (what CaRe's stage I trains
on), in ``caption_presets/`` beside this module; a user's own file is given by path. The
same prompt is rendered for training (stage I's supervised captioning) and for generation
(:func:`caption_prompt`): one user turn holding the video, then the instruction.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from vlr_plugins.errors import ConfigError
from vlr_plugins.mllm.media_input import VideoInput

__all__ = ["CAPTION_PROMPT", "CaptionSettings", "caption_messages", "caption_prompt", "list_caption_settings",
           "load_caption_settings"]

#: CaRe's stage-I instruction and CaReBench's default captioning prompt (paper sec. 4.1, 5.2)
CAPTION_PROMPT = "Describe the video in detail."
_KEYS = {"name", "description", "prompt", "video_input", "generation"}
# generation arguments that must be plain values in a file (a typo is refused, not ignored)
_GENERATION_KEYS = {"max_new_tokens", "min_new_tokens", "do_sample", "temperature", "top_p", "top_k", "num_beams",
                    "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "seed"}
_FOLDER = "caption_presets"


@dataclass(frozen=True)
class CaptionSettings:
    """How videos are captioned: ``prompt``, ``video_input`` (frames, pixel limits), and
    ``generation`` (``max_new_tokens``, ``do_sample``, ``temperature``, ``top_p``, ``top_k``,
    ``num_beams``, ``repetition_penalty``, ..., and ``seed`` for sampled decoding)."""

    name: str = "custom"
    prompt: str = CAPTION_PROMPT
    video_input: VideoInput = field(default_factory=lambda: VideoInput(num_frames=32))
    generation: dict[str, Any] = field(default_factory=lambda: {"max_new_tokens": 1024, "do_sample": False})
    description: str = ""
    source: str = ""

    def describe(self) -> dict[str, Any]:
        """Plain data for a run's settings record (what a resumed run must match)."""
        return {"name": self.name, "prompt": self.prompt, "video_input": dict(self.video_input.__dict__),
                "generation": dict(self.generation)}


def caption_messages(prompt: str) -> list[dict[str, Any]]:
    """One user turn: the video, then the instruction (Qwen2-VL's layout)."""
    return [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": prompt}]}]


def caption_prompt(processor: Any, prompt: str = CAPTION_PROMPT) -> str:
    """The instruction in the model's chat template, with the generation prompt: what a
    caption follows in training and in generation."""
    for owner in (processor, getattr(processor, "tokenizer", None)):
        if getattr(owner, "chat_template", None):
            return owner.apply_chat_template(caption_messages(prompt), tokenize=False, add_generation_prompt=True)
    raise ConfigError("captioning needs a chat MLLM: neither the processor nor its tokenizer has a chat template")


def _shipped() -> dict[str, Path]:
    folder = resources.files("vlr_plugins.mllm") / _FOLDER
    return {Path(str(p)).stem: Path(str(p)) for p in folder.iterdir() if str(p).endswith(".yaml")}


def list_caption_settings() -> dict[str, str]:
    """The shipped settings: ``{name: description}``."""
    return {name: load_caption_settings(name).description for name in sorted(_shipped())}


def load_caption_settings(name_or_path: str | os.PathLike[str] | CaptionSettings = "carebench") -> CaptionSettings:
    """Shipped settings by name (``carebench``, ``care_stage1``) or a YAML file; errors name the file and key."""
    if isinstance(name_or_path, CaptionSettings):
        return name_or_path
    p = Path(name_or_path)
    shipped = _shipped()
    if p.suffix not in (".yaml", ".yml") and not p.exists():
        if str(name_or_path) not in shipped:
            raise ConfigError(f"no caption settings named {str(name_or_path)!r} and no such file; "
                              f"shipped: {', '.join(sorted(shipped))}")
        p = shipped[str(name_or_path)]
    try:
        with open(p, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such caption settings file") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: caption settings are a mapping, found {type(raw).__name__}")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ConfigError(f"{p}: unknown key {unknown[0]!r}; expected some of {sorted(_KEYS)}")
    prompt = raw.get("prompt", CAPTION_PROMPT)
    if not isinstance(prompt, str) or not prompt.strip():
        raise ConfigError(f"{p}, key 'prompt': expected a non-empty string, found {prompt!r}")
    generation = raw.get("generation") or {}
    if not isinstance(generation, dict):
        raise ConfigError(f"{p}, key 'generation': expected a mapping, found {type(generation).__name__}")
    bad = sorted(set(generation) - _GENERATION_KEYS)
    if bad:
        raise ConfigError(f"{p}, key 'generation.{bad[0]}': not a generation argument this command passes; "
                          f"known: {', '.join(sorted(_GENERATION_KEYS))}")
    tokens = generation.get("max_new_tokens", 1024)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ConfigError(f"{p}, key 'generation.max_new_tokens': expected an integer >= 1, found {tokens!r}")
    try:
        video = VideoInput(**(raw.get("video_input") or {}))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{p}, key 'video_input': {e}") from None
    return CaptionSettings(name=str(raw.get("name") or p.stem), prompt=prompt, video_input=video,
                           generation={"max_new_tokens": tokens, **generation},
                           description=str(raw.get("description") or ""), source=str(p))
