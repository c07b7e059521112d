"""Detailed video captions from a chat MLLM with transformers' ``generate`` (CaRe, CaReBench Table 2).

:class:`VideoCaptioner` renders the captioning prompt in the model's chat template
(:func:`~vlr_plugins.mllm.caption_settings.caption_prompt`), hands each clip's frames to the
processor as :class:`~vlr_plugins.mllm.VideoInput` says (the same sampler and pixel limits
as the embedder), pads a batch on the left and decodes only the new tokens. The clips of a
call are captioned in batches of similar length (:func:`~vlr_plugins.mllm.length_batches.length_batches`),
so a short clip's row does not carry a long one's padding through every decoding step;
the captions come back in the call's order, the same as one clip at a time under greedy
decoding.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from vlr_plugins.mllm.caption_settings import CaptionSettings, caption_prompt, load_caption_settings
from vlr_plugins.mllm.length_batches import in_input_order, length_batches
from vlr_plugins.mllm.media_input import clip_pixels, media_token_counts, processor_video_kwargs

__all__ = ["VideoCaptioner"]

_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


class VideoCaptioner:
    """``model`` (an ``AutoModelForImageTextToText``) + ``processor`` -> one caption per video.

    ``settings``: a :class:`CaptionSettings`, a shipped name (``carebench``) or a YAML file.
    ``caption(videos)`` takes paths or ``(T, 3, H, W)`` frame tensors and returns strings.
    Sampled decoding (``do_sample: true``) is seeded from ``generation.seed`` (default 0)
    before each batch, so a rerun gives the same captions.

    Example::

        emb = load_eol_embedder("path/to/CaRe-7B", dtype="bfloat16", device="cuda")
        cap = VideoCaptioner(emb.model, emb.processor, "carebench")
        cap.caption(["v_00000030_5.mp4"])
    """

    backend = "transformers"

    def __init__(self, model: Any, processor: Any, settings: CaptionSettings | str | os.PathLike[str] = "carebench"
                 ) -> None:
        self.model = model.eval()
        self.processor = processor
        self.settings = load_caption_settings(settings)
        self.prompt = caption_prompt(processor, self.settings.prompt)
        image_processor = getattr(processor, "image_processor", None)
        self.image_mean = tuple(getattr(image_processor, "image_mean", None) or _CLIP_MEAN)
        self.image_std = tuple(getattr(image_processor, "image_std", None) or _CLIP_STD)
        generation = dict(self.settings.generation)
        self.seed = int(generation.pop("seed", 0))
        self.generation = generation
        tokenizer = getattr(processor, "tokenizer", None) or processor
        if tokenizer.pad_token_id is not None:
            self.generation.setdefault("pad_token_id", tokenizer.pad_token_id)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def frames(self, video: Any) -> torch.Tensor:
        """The clip as the processor takes it (decoded and sampled when ``video`` is a path)."""
        return clip_pixels(video, self.settings.video_input, self.image_mean, self.image_std)

    def inputs(self, clips: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
        """The left-padded model inputs of prepared clips (:meth:`frames`)."""
        batch = self.processor(text=[self.prompt] * len(clips), videos=list(clips), padding=True,
                               padding_side="left", return_tensors="pt",
                               **processor_video_kwargs(self.processor, self.settings.video_input))
        return {k: v.to(self.device) for k, v in batch.items() if isinstance(v, torch.Tensor)}

    def token_counts(self, clips: Sequence[torch.Tensor]) -> list[int]:
        """Each prepared clip's prompt length in the language model's tokens (the prompt's own
        tokens and the clip's vision tokens), what batches are grouped by."""
        prompt = len(getattr(self.processor, "tokenizer", self.processor)(self.prompt)["input_ids"]) - 1
        kw = processor_video_kwargs(self.processor, self.settings.video_input)
        return [prompt + n for n in media_token_counts(self.processor, "video", clips, kw)]

    @torch.no_grad()
    def caption_clips(self, clips: Sequence[torch.Tensor], batch_size: int | None = None) -> list[str]:
        """Captions of prepared clips, in order: generated in batches of at most ``batch_size``
        clips (``None``: all of them) of similar length, longest first."""
        clips = list(clips)
        if not clips:
            return []
        batches = [list(range(len(clips)))]
        if len(clips) > 1:
            batches = length_batches(self.token_counts(clips), batch_size=batch_size)
        return in_input_order(batches, [self._generate([clips[i] for i in batch]) for batch in batches])

    def _generate(self, clips: list[torch.Tensor]) -> list[str]:
        inputs = self.inputs(clips)
        if self.generation.get("do_sample"):
            torch.manual_seed(self.seed)
        out = self.model.generate(**inputs, **self.generation)
        new = out[:, inputs["input_ids"].shape[1]:]
        return [t.strip() for t in self.processor.batch_decode(new, skip_special_tokens=True)]

    def caption(self, videos: Sequence[Any], batch_size: int | None = None) -> list[str]:
        """Captions of videos (paths or ``(T, 3, H, W)`` tensors), in order."""
        return self.caption_clips([self.frames(v) for v in videos], batch_size)
