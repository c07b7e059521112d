"""EOL-prompt embeddings of a transformers MLLM (or LLM): one prefill pass, last-token state.

:class:`EOLEmbedder` wraps a chat MLLM and its processor (Qwen2-VL, Qwen2.5-VL, or any
``AutoModelForImageTextToText`` with an ``AutoProcessor``), or a plain causal LM and its
tokenizer for text-only, E5-V-style use. It renders each input into an EOL prompt
(:mod:`vlr_plugins.mllm.prompt`), pads the batch on the left, runs the model's base
(no LM head, no generation) once, and takes the last layer's hidden state at the last
token -- what E5-V reads as ``hidden_states[-1][:, -1, :]`` and CaReBench as the first
step of ``generate(max_new_tokens=1)``. Embeddings come out L2-normalised, in float32.

It follows :class:`~vlr_plugins.vision.protocol.VideoTower`, so retrieval evaluation can
score it like any other tower. Importing this module needs only torch; transformers is
imported by :meth:`EOLEmbedder.from_pretrained` paths.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from vlr_plugins.errors import ConfigError, loading_pretrained
from vlr_plugins.mllm.length_batches import check_batch_limits, check_max_padding, length_batches
from vlr_plugins.mllm.media_input import (
    VideoInput,
    clip_pixels,
    image_pixels,
    media_token_counts,
    processor_video_kwargs,
)
from vlr_plugins.mllm.model_dtype import resolve_model_dtype
from vlr_plugins.mllm.pooling import last_token_pool, with_text_positions
from vlr_plugins.mllm.prompt import MODALITIES, EOLPrompt, load_eol_prompt, truncate_sentences
from vlr_plugins.registry import MODELS

__all__ = ["EOLEmbedder", "MODEL_KINDS", "chat_renderer"]

MODEL_KINDS = ("auto", "mllm", "llm")
# OpenAI CLIP statistics: Qwen2-VL's processor normalises with them
_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def chat_renderer(processor: Any, prompt_name: str = "?") -> Any:
    """``messages -> str`` with the generation prompt, by the processor's chat template, else
    its tokenizer's; refuses (naming the prompt) when neither has one."""
    for owner in (processor, getattr(processor, "tokenizer", None)):
        if getattr(owner, "chat_template", None):
            return lambda messages: owner.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def refuse(messages: list[dict[str, Any]]) -> str:
        raise ConfigError(f"EOL prompt {prompt_name!r} is written for a chat template, and neither the "
                          f"processor nor the tokenizer has one (use a prompt file with chat_template: false)")

    return refuse


def _is_mllm_config(pretrained: str, trust_remote_code: bool) -> bool:
    from transformers import AutoConfig

    with loading_pretrained(pretrained, "pretrained", needs="config.json"):
        config = AutoConfig.from_pretrained(pretrained, trust_remote_code=trust_remote_code)
    return getattr(config, "vision_config", None) is not None


@MODELS.register
class EOLEmbedder(nn.Module):
    """Text, image and video embeddings of an MLLM: the last token's state under an EOL prompt.

    Expects a transformers model and its processor (``model=``, ``processor=``), or a folder /
    Hub id (``pretrained=``) loaded with ``AutoModelForImageTextToText`` + ``AutoProcessor``
    (``kind="mllm"``) or ``AutoModelForCausalLM`` + ``AutoTokenizer`` (``kind="llm"``; text
    only); ``kind="auto"`` reads the config (a ``vision_config`` means an MLLM). ``prompt``
    is a shipped EOL prompt family (``"care"``, ``"care_train"``, ``"e5v"``) or a YAML file.

    Formula: ``emb(x) = normalize(h_L[last])``, ``h_L`` the last layer's hidden states
    (after the final norm) of the prompt that holds ``x``, ``last`` its last real token;
    batches are padded on the left, so ``last`` is the last column, and a text batch's
    positions count each row's real tokens from 0 (:func:`~vlr_plugins.mllm.pooling.with_text_positions`).

    Batching: ``encode_*`` sort a call's items by prompt length in tokens (vision tokens
    included) and run them in batches of at most ``batch_size`` items and
    ``max_batch_tokens`` padded tokens, with at most a ``max_padding`` share of padding
    (``None``: no limit), so each batch pays for its own longest item, not the call's; rows come back in the call's order, equal to one item at
    a time (to float rounding: tested to 1e-5). A budget also bounds the memory of long
    captions and clips (docs/benchmarks.md, "MLLM embeddings").

    Reference: Jiang et al., "E5-V: Universal Embeddings with Multimodal Large Language
    Models", 2024; Xu et al., "CaReBench: A Fine-Grained Benchmark for Video Captioning
    and Retrieval" (CaRe, sec. 4.2), 2025.

    Relations: ``encode_text`` / ``encode_image`` / ``encode_video`` follow the
    :class:`~vlr_plugins.vision.protocol.VideoTower` protocol; ``embed`` is the same pooling
    on already prepared inputs, with gradients (stage-II training uses it). Video settings
    (frames, repetition, pixel limits) come from the prompt file's ``video_input`` unless
    given here.

    Example::

        emb = EOLEmbedder("Qwen/Qwen2-VL-7B-Instruct", prompt="care", dtype="bfloat16", device="cuda")
        t = emb.encode_text(["A man slices a watermelon."])          # (1, 3584)
        v = emb.encode_video(["clip.mp4"])                            # 32 frames, uniform
        (t @ v.T).item()
    """

    def __init__(
        self,
        pretrained: str | os.PathLike[str] | None = None,
        *,
        model: nn.Module | None = None,
        processor: Any = None,
        prompt: str | os.PathLike[str] | EOLPrompt = "care",
        kind: str = "auto",
        dtype: str | torch.dtype | None = None,
        device: str | torch.device | None = None,
        attn_implementation: str | None = None,
        trust_remote_code: bool = False,
        max_text_tokens: int | None = None,
        num_frames: int | None = None,
        frame_strategy: str | None = None,
        frame_repeat: int | None = None,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        batch_size: int | None = 32,
        max_batch_tokens: int | None = None,
        max_padding: float | None = 0.1,
    ) -> None:
        super().__init__()
        if kind not in MODEL_KINDS:
            raise ConfigError(f"kind must be one of {MODEL_KINDS}, found {kind!r}")
        if (pretrained is None) == (model is None):
            raise ConfigError("EOLEmbedder needs either pretrained= (a folder or Hub id) or model= "
                              "(with processor=), not both and not neither")
        if model is not None and processor is None:
            raise ConfigError("EOLEmbedder(model=...) needs the model's processor (or tokenizer) as processor=")
        if pretrained is not None:
            model, processor, kind = self._load(str(pretrained), kind, resolve_model_dtype(dtype), attn_implementation,
                                                trust_remote_code)
        elif kind == "auto":
            kind = "mllm" if getattr(model.config, "vision_config", None) is not None else "llm"
        if device is not None:
            model = model.to(device)
        self.model = model
        self.processor = processor
        self.kind = kind
        self.tokenizer = getattr(processor, "tokenizer", None) or processor
        self.prompt = load_eol_prompt(prompt)
        if max_text_tokens is not None and max_text_tokens < 1:
            raise ConfigError(f"max_text_tokens must be >= 1 or None, found {max_text_tokens!r}")
        self.max_text_tokens = max_text_tokens
        try:
            check_batch_limits(batch_size, max_batch_tokens, "EOLEmbedder")
            check_max_padding(max_padding, "EOLEmbedder")
        except ValueError as e:
            raise ConfigError(str(e)) from None
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.max_padding = max_padding
        spec = self.prompt.video_input
        overrides = dict(num_frames=num_frames, strategy=frame_strategy, frame_repeat=frame_repeat,
                         min_pixels=min_pixels, max_pixels=max_pixels)
        try:
            self.video_input = VideoInput(**{**spec.__dict__, **{k: v for k, v in overrides.items() if v is not None}})
        except ValueError as e:
            raise ConfigError(f"EOLEmbedder video settings: {e}") from None
        image_processor = getattr(processor, "image_processor", None)
        self.image_mean = tuple(getattr(image_processor, "image_mean", None) or _CLIP_MEAN)
        self.image_std = tuple(getattr(image_processor, "image_std", None) or _CLIP_STD)

    # ------------------------------------------------------------------ loading

    @staticmethod
    def _load(pretrained: str, kind: str, dtype: torch.dtype | None, attn_implementation: str | None,
              trust_remote_code: bool) -> tuple[nn.Module, Any, str]:
        import transformers as tf

        if kind == "auto":
            kind = "mllm" if _is_mllm_config(pretrained, trust_remote_code) else "llm"
        kw: dict[str, Any] = {"trust_remote_code": trust_remote_code}
        if dtype is not None:
            kw["dtype"] = dtype
        if attn_implementation is not None:
            kw["attn_implementation"] = attn_implementation
        with loading_pretrained(pretrained, "pretrained"):
            if kind == "mllm":
                model = tf.AutoModelForImageTextToText.from_pretrained(pretrained, **kw)
                processor = tf.AutoProcessor.from_pretrained(pretrained, trust_remote_code=trust_remote_code)
            else:
                model = tf.AutoModelForCausalLM.from_pretrained(pretrained, **kw)
                processor = tf.AutoTokenizer.from_pretrained(pretrained, trust_remote_code=trust_remote_code)
        return model.eval(), processor, kind

    # ------------------------------------------------------------------ protocol attributes

    @property
    def embedding_dim(self) -> int:
        """D: the language model's hidden size."""
        config = self.model.config
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        return int(text.hidden_size)

    @property
    def image_size(self) -> int:
        """The side of the largest square the processor keeps as is (``VideoTower``): the
        processor resizes any frame itself, so this only guides callers that resize first."""
        vp = getattr(self.processor, "video_processor", None) or getattr(self.processor, "image_processor", None)
        factor = int(getattr(vp, "patch_size", 14) or 14) * int(getattr(vp, "merge_size", 2) or 2)
        limit = self.video_input.max_pixels or (getattr(vp, "size", None) or {}).get("longest_edge") or 448 * 448
        return max(factor, math.isqrt(int(limit)) // factor * factor)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # ------------------------------------------------------------------ prompts and inputs

    def _chat(self, messages: list[dict[str, Any]]) -> str:
        return chat_renderer(self.processor, self.prompt.name)(messages)

    def _media_tokens(self) -> dict[str, str]:
        out = {}
        for kind in ("image", "video"):
            token = getattr(self.processor, f"{kind}_token", None)
            if token is not None:
                out[kind] = token
        return out

    def prompts(self, modality: str, sentences: Sequence[str] | None = None, count: int | None = None) -> list[str]:
        """The rendered prompts: one per sentence (``text``), or ``count`` copies (image, video)."""
        if modality == "text":
            return self.prompt.render_texts(truncate_sentences(self.tokenizer, sentences or [], self.max_text_tokens),
                                            chat=self._chat)
        one = self.prompt.render(modality, chat=self._chat, media_tokens=self._media_tokens())
        return [one] * int(count or 0)

    def inputs(self, modality: str, items: Sequence[Any]) -> dict[str, torch.Tensor]:
        """The model inputs for a batch of one modality, left-padded, on the model's device.

        ``text``: strings; ``image``: paths, PIL images or ``(3, H, W)`` tensors; ``video``:
        paths or ``(T, 3, H, W)`` tensors (:mod:`vlr_plugins.mllm.media_input`). All of
        ``items`` make one batch (``encode_*`` cut a call into length-sorted batches first).
        """
        return self._process(modality, *self._prepare(modality, items))

    def _prepare(self, modality: str, items: Sequence[Any]) -> tuple[list[str], list[Any] | None]:
        """Each item's prompt, and its pixels as the processor takes them (``None`` for text)."""
        if modality not in MODALITIES:
            raise ValueError(f"modality must be one of {MODALITIES}, found {modality!r}")
        items = list(items)
        if not items:
            raise ValueError(f"EOLEmbedder: no {modality} to encode (an empty batch)")
        if modality == "text":
            bad = [i for i, t in enumerate(items) if not isinstance(t, str)]
            if bad:
                raise TypeError(f"EOLEmbedder.encode_text: item {bad[0]} is a {type(items[bad[0]]).__name__}, "
                                f"not a string (images and videos go to encode_image / encode_video)")
            return self.prompts("text", items), None
        if self.kind == "llm":
            raise ConfigError(f"EOLEmbedder: a text-only model (kind='llm') cannot encode {modality}s")
        if modality == "image":
            media = [image_pixels(x, self.image_mean, self.image_std) for x in items]
        else:
            media = [clip_pixels(x, self.video_input, self.image_mean, self.image_std) for x in items]
        return self.prompts(modality, count=len(items)), media

    def _process(self, modality: str, text: list[str], media: list[Any] | None) -> dict[str, torch.Tensor]:
        """One left-padded batch of prepared items (:meth:`_prepare`), on the model's device."""
        kw: dict[str, Any] = {"padding": True, "padding_side": "left", "return_tensors": "pt"}
        if modality == "text":
            if self.kind == "llm":
                batch = self.tokenizer(text, return_token_type_ids=False, **kw)
            else:
                batch = self.processor(text=text, **kw)
        elif modality == "image":
            batch = self.processor(text=text, images=media, **kw, **self._size_kwargs("image"))
        else:
            batch = self.processor(text=text, videos=media, **kw, **self._size_kwargs("video"))
        return {k: v.to(self.device) for k, v in batch.items() if isinstance(v, torch.Tensor)}

    def token_counts(self, modality: str, text: Sequence[str], media: Sequence[Any] | None = None) -> list[int]:
        """Each prepared item's length in the language model's tokens, what batches are sorted
        and budgeted by: the prompt's tokens, and for media the vision tokens the processor
        will put in its placeholder (exact for Qwen2-VL-style processors, which say how many
        patches a size gives; else estimated from the pixels, as for Qwen2-VL)."""
        ids = self.tokenizer(list(text))["input_ids"]
        if media is None:
            return [len(row) for row in ids]
        return [len(row) - 1 + n for row, n in zip(ids, media_token_counts(self.processor, modality, media,
                                                                         self._size_kwargs(modality)))]

    def _size_kwargs(self, modality: str) -> dict[str, Any]:
        return processor_video_kwargs(self.processor, self.video_input) if modality == "video" else {}

    # ------------------------------------------------------------------ embedding

    def embed(self, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """(B, D) last-token states of prepared inputs (:meth:`inputs`), in the model's dtype,
        not normalised, with gradients when enabled: the training path."""
        backbone = self.model.base_model if hasattr(self.model, "base_model") else self.model
        out = backbone(**with_text_positions(inputs), use_cache=False)
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        return last_token_pool(hidden, inputs["attention_mask"])

    @torch.no_grad()
    def _encode(self, modality: str, items: Sequence[Any]) -> torch.Tensor:
        text, media = self._prepare(modality, items)
        if len(text) == 1 or (self.batch_size is None and self.max_batch_tokens is None):
            batches = [list(range(len(text)))]
        else:
            batches = length_batches(self.token_counts(modality, text, media), batch_size=self.batch_size,
                                     max_tokens=self.max_batch_tokens, max_padding=self.max_padding)
        out: torch.Tensor | None = None
        for batch in batches:
            part = None if media is None else [media[i] for i in batch]
            inputs = self._process(modality, [text[i] for i in batch], part)
            emb = F.normalize(self.embed(inputs).float(), dim=-1)
            if out is None:
                out = emb.new_empty(len(text), emb.shape[1])
            out[torch.tensor(batch, device=emb.device)] = emb
        return out

    def encode_text(self, texts: str | Sequence[str]) -> torch.Tensor:
        """``texts`` -> (B, D) L2-normalised float32, one prefill pass over the batch."""
        return self._encode("text", [texts] if isinstance(texts, str) else texts)

    def encode_image(self, images: Any) -> torch.Tensor:
        """``images`` (B, 3, H, W) tensor, or a list of paths / PIL images / (3, H, W) tensors
        -> (B, D) L2-normalised float32."""
        if isinstance(images, torch.Tensor) and images.ndim == 4:
            images = list(images)
        return self._encode("image", images if isinstance(images, (list, tuple)) else [images])

    def encode_video(self, videos: Any) -> torch.Tensor:
        """``videos`` (B, T, 3, H, W) tensor, or a list of paths / (T, 3, H, W) tensors
        -> (B, D) L2-normalised float32. Files are decoded to ``video_input.num_frames``
        frames by ``video_input.strategy``; every clip gets ``frame_repeat`` copies of each frame."""
        if isinstance(videos, torch.Tensor) and videos.ndim == 5:
            videos = list(videos)
        return self._encode("video", videos if isinstance(videos, (list, tuple)) else [videos])

    def encode(self, texts: Sequence[str] | None = None, images: Any = None, videos: Any = None) -> torch.Tensor:
        """Embeddings of one modality; a call that mixes modalities is refused, since one
        batch runs one prompt (encode each modality in its own call)."""
        given = {k: v for k, v in (("texts", texts), ("images", images), ("videos", videos)) if v is not None}
        if len(given) != 1:
            found = ", ".join(f"{k} ({len(v) if hasattr(v, '__len__') else 1})" for k, v in given.items()) or "nothing"
            raise ValueError(f"EOLEmbedder.encode takes one modality per call; found {found}: call "
                             f"encode_text, encode_image and encode_video separately")
        (key, value), = given.items()
        return {"texts": self.encode_text, "images": self.encode_image, "videos": self.encode_video}[key](value)

    forward = encode

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, prompt={self.prompt.name!r}, video_input={self.video_input}"
