"""Generation with a transformers chat MLLM on this machine: batched, left-padded, seeded."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from typing import Any

import torch

from vlr_plugins.chat.batched import BatchedChatBackend
from vlr_plugins.chat.cache import ChatCache
from vlr_plugins.chat.media import media_of, template_messages
from vlr_plugins.errors import ConfigError
from vlr_plugins.mllm.embedder import chat_renderer
from vlr_plugins.mllm.media_input import VideoInput, clip_pixels, image_pixels

__all__ = ["TransformersChatBackend"]

# OpenAI CLIP statistics (what Qwen2-VL's processor normalises with); only float tensors use them
_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def _generate_kwargs(sampling: dict[str, Any]) -> dict[str, Any]:
    """OpenAI sampling names -> ``model.generate`` arguments (temperature 0: greedy)."""
    kw: dict[str, Any] = {"max_new_tokens": int(sampling.get("max_tokens", 256))}
    temperature = float(sampling.get("temperature", 1.0))
    if temperature > 0:
        kw.update(do_sample=True, temperature=temperature, top_p=float(sampling.get("top_p", 1.0)))
        if sampling.get("top_k") is not None:
            kw["top_k"] = int(sampling["top_k"])
    else:
        kw["do_sample"] = False
    if sampling.get("repetition_penalty") is not None:
        kw["repetition_penalty"] = float(sampling["repetition_penalty"])
    return kw


class TransformersChatBackend(BatchedChatBackend):
    """Answers chat requests with a transformers chat MLLM (Qwen2-VL, Qwen2.5-VL, Llama 3.2
    Vision, any ``AutoModelForImageTextToText`` with a processor) or a causal LM.

    Expects ``pretrained`` (a Hub id or folder, loaded as :class:`~vlr_plugins.mllm.EOLEmbedder`
    loads it: ``AutoModelForImageTextToText`` + ``AutoProcessor``, or ``AutoModelForCausalLM``
    + ``AutoTokenizer`` for a model without a vision config), or ``model=`` with its
    ``processor=``. Each batch of up to ``batch_size`` requests with the same sampling is
    rendered by the processor's chat template (:func:`~vlr_plugins.mllm.chat_renderer`),
    padded on the left and generated in one ``model.generate`` call; media parts are read
    by :mod:`vlr_plugins.mllm.media_input` (videos: their ``num_frames`` / ``strategy``).

    Sampling uses OpenAI names (``max_tokens`` new tokens; temperature 0 is greedy). The
    requests' seeds seed the batch (``torch.manual_seed`` of a hash of them), so a batch of
    the same requests gives the same answers; a sampled answer still depends on which
    requests share its batch. Re-asks, the cache and failures: :class:`BatchedChatBackend`.

    Example::

        backend = TransformersChatBackend("Qwen/Qwen2-VL-7B-Instruct", dtype="bfloat16", device="cuda")
        [result] = backend.complete_many([[{"role": "user", "content": [
            {"type": "image", "image": "cat.jpg"}, {"type": "text", "text": "Describe it."}]}]])
    """

    def __init__(self, pretrained: str | os.PathLike[str] | None = None, *, model: Any = None, processor: Any = None,
                 dtype: str | None = None, device: str | None = None, batch_size: int = 8, reasks: int = 2,
                 cache: ChatCache | None = None, attn_implementation: str | None = None,
                 trust_remote_code: bool = False, name: str | None = None) -> None:
        if (pretrained is None) == (model is None):
            raise ConfigError("TransformersChatBackend needs either pretrained= (a folder or Hub id) or model= "
                              "(with processor=), not both and not neither")
        if model is not None and processor is None:
            raise ConfigError("TransformersChatBackend(model=...) needs the model's processor (or tokenizer)")
        if pretrained is not None:
            from vlr_plugins.mllm.embedder import EOLEmbedder

            # the embedder's loader: Auto classes by the config's kind, errors that name the setting
            loaded = EOLEmbedder(str(pretrained), dtype=dtype, attn_implementation=attn_implementation,
                                 trust_remote_code=trust_remote_code)
            model, processor = loaded.model, loaded.processor
        if device is not None:
            model = model.to(device)
        super().__init__(name or str(pretrained or getattr(model.config, "_name_or_path", "") or type(model).__name__),
                         reasks=reasks, cache=cache, batch_size=batch_size)
        self.model = model.eval()
        self.processor = processor
        self.tokenizer = getattr(processor, "tokenizer", None) or processor
        self._render = chat_renderer(processor, self.model_name)
        image_processor = getattr(processor, "image_processor", None)
        self._mean = tuple(getattr(image_processor, "image_mean", None) or _CLIP_MEAN)
        self._std = tuple(getattr(image_processor, "image_std", None) or _CLIP_STD)

    def describe(self) -> dict[str, Any]:
        return {"backend": "transformers", "model": self.model_name, "batch_size": self.batch_size}

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate_batch(self, batch: Sequence[tuple[list[dict[str, Any]], dict[str, Any]]]) -> list[str | Exception]:
        out: list[str | Exception | None] = [None] * len(batch)
        groups: dict[str, list[int]] = {}
        for i, (_, sampling) in enumerate(batch):
            plain = {k: v for k, v in sampling.items() if k != "seed"}
            groups.setdefault(repr(sorted(plain.items())), []).append(i)
        for members in groups.values():
            prepared: list[tuple[int, str, list[Any], list[Any]]] = []
            for i in members:
                try:
                    prepared.append((i, *self._prepare(batch[i][0])))
                except (OSError, ValueError, TypeError) as e:  # this request's media, alone
                    out[i] = e
            if prepared:
                texts = self._generate([p[1:] for p in prepared], [batch[p[0]][1] for p in prepared])
                for (i, *_), text in zip(prepared, texts):
                    out[i] = text
        return out  # type: ignore[return-value]

    def _prepare(self, messages: list[dict[str, Any]]) -> tuple[str, list[Any], list[Any]]:
        text = self._render(template_messages(messages))
        images, videos = [], []
        for part in media_of(messages):
            if part["type"] == "image":
                images.append(image_pixels(part["image"], self._mean, self._std))
            else:
                spec = VideoInput(num_frames=int(part.get("num_frames", 16)), strategy=part.get("strategy", "uniform"))
                videos.append(clip_pixels(part["video"], spec, self._mean, self._std))
        return text, images, videos

    @torch.no_grad()
    def _generate(self, prepared: list[tuple[str, list[Any], list[Any]]],
                  samplings: list[dict[str, Any]]) -> list[str]:
        texts = [p[0] for p in prepared]
        images = [x for p in prepared for x in p[1]]
        videos = [x for p in prepared for x in p[2]]
        kw: dict[str, Any] = {"padding": True, "padding_side": "left", "return_tensors": "pt"}
        if images:
            kw["images"] = images
        if videos:
            kw["videos"] = videos
            if hasattr(getattr(self.processor, "video_processor", None), "do_sample_frames"):
                kw["do_sample_frames"] = False  # the frames given are the frames seen
        if images or videos:
            inputs = self.processor(text=texts, **kw)
        else:
            call = self.processor if hasattr(self.processor, "image_processor") else self.tokenizer
            inputs = call(text=texts, **kw) if call is self.processor else call(texts, **kw)
        inputs = {k: v.to(self.device) for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        seeds = ",".join(str(s.get("seed", "")) for s in samplings)
        torch.manual_seed(int(hashlib.sha256(seeds.encode()).hexdigest()[:8], 16))
        pad = getattr(self.tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(self.tokenizer, "eos_token_id", None)
        generated = self.model.generate(**inputs, **_generate_kwargs(samplings[0]), pad_token_id=pad)
        new = generated[:, inputs["input_ids"].shape[1]:]
        self.summary.add(prompt_tokens=int(inputs["attention_mask"].sum()),
                         completion_tokens=int((new != pad).sum()) if pad is not None else new.numel())
        return self.tokenizer.batch_decode(new, skip_special_tokens=True)
