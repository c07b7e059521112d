"""LAVIS text processor ``vlr_text``: no silent word cut.

LAVIS' ``blip_caption`` lower-cases, strips punctuation and cuts every text at 50 words,
which silently drops the second half of a 128-token paragraph. ``vlr_text`` leaves the
length to the recipe: each text view's token budget is applied by the model's tokenizer
(``blip_retrieval_textonly``), so the processor only normalises whitespace, and
optionally applies BLIP's ``pre_caption`` clean-up and a word limit when asked to.
"""

from __future__ import annotations

import re

from lavis.processors.base_processor import BaseProcessor
from lavis.processors.blip_processors import BlipCaptionProcessor
from omegaconf import OmegaConf

from vlr_plugins.errors import ConfigError
from vlr_plugins.integrations.lavis._registry import register

__all__ = ["VlrTextProcessor"]


@register("processor", "vlr_text")
class VlrTextProcessor(BaseProcessor):
    """``prompt`` + the text with whitespace collapsed.

    ``blip_clean: true`` applies BLIP's ``pre_caption`` (lower case, punctuation removed);
    ``max_words`` (default none) cuts at that many words. The token budget is not the
    processor's business: it comes with each text from the recipe's views.
    """

    def __init__(self, prompt: str = "", max_words: int | None = None, blip_clean: bool = False) -> None:
        if max_words is not None and max_words < 1:
            raise ConfigError(f"vlr_text: max_words must be >= 1 or null, found {max_words}")
        self.prompt, self.max_words, self.blip_clean = prompt, max_words, blip_clean
        # BLIP's clean-up itself, with the word cut disabled (max_words applies below)
        self._blip = BlipCaptionProcessor(max_words=10**9)

    def __call__(self, text: str) -> str:
        text = self._blip.pre_caption(text) if self.blip_clean else re.sub(r"\s+", " ", text).strip()
        if self.max_words is not None:
            words = text.split(" ")
            if len(words) > self.max_words:
                text = " ".join(words[: self.max_words])
        return self.prompt + text

    @classmethod
    def from_config(cls, cfg=None):
        cfg = cfg if cfg is not None else OmegaConf.create()
        return cls(prompt=cfg.get("prompt", ""), max_words=cfg.get("max_words", None),
                   blip_clean=bool(cfg.get("blip_clean", False)))
