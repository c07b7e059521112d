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
from vlr_plugins.mllm.media_input import VideoInput, clip_pixels, image_pixels, processor_video_kwargs
from vlr_plugins.mllm.model_dtype import resolve_model_dtype
from vlr_plugins.mllm.pooling import last_token_pool
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
    batches are padded on the left, so ``last`` is the last column.

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
        paths or ``(T, 3, H, W)`` tensors (:mod:`vlr_plugins.mllm.media_input`).
        """
        if modality not in MODALITIES:
            raise ValueError(f"modality must be one of {MODALITIES}, found {modality!r}")
        items = list(items)
        if not items:
            raise ValueError(f"EOLEmbedder: no {modality} to encode (an empty batch)")
        kw: dict[str, Any] = {"padding": True, "padding_side": "left", "return_tensors": "pt"}
        if modality == "text":
            bad = [i for i, t in enumerate(items) if not isinstance(t, str)]
            if bad:
                raise TypeError(f"EOLEmbedder.encode_text: item {bad[0]} is a {type(items[bad[0]]).__name__}, "
                                f"not a string (images and videos go to encode_image / encode_video)")
            text = self.prompts("text", items)
            if self.kind == "llm":
                batch = self.tokenizer(text, return_token_type_ids=False, **kw)
            else:
                batch = self.processor(text=text, **kw)
        else:
            if self.kind == "llm":
                raise ConfigError(f"EOLEmbedder: a text-only model (kind='llm') cannot encode {modality}s")
            text = self.prompts(modality, count=len(items))
            if modality == "image":
                pixels = [image_pixels(x, self.image_mean, self.image_std) for x in items]
                batch = self.processor(text=text, images=pixels, **kw, **self._size_kwargs("image"))
            else:
                clips = [clip_pixels(x, self.video_input, self.image_mean, self.image_std) for x in items]
                batch = self.processor(text=text, videos=clips, **kw, **self._size_kwargs("video"))
        return {k: v.to(self.device) for k, v in batch.items() if isinstance(v, torch.Tensor)}

    def _size_kwargs(self, modality: str) -> dict[str, Any]:
        return processor_video_kwargs(self.processor, self.video_input) if modality == "video" else {}

    # ------------------------------------------------------------------ embedding

    def embed(self, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """(B, D) last-token states of prepared inputs (:meth:`inputs`), in the model's dtype,
        not normalised, with gradients when enabled: the training path."""
        backbone = self.model.base_model if hasattr(self.model, "base_model") else self.model
        if self.kind == "llm" and "position_ids" not in inputs:
            # positions count real tokens only, so a left-padded row matches it unpadded
            inputs = {**inputs, "position_ids": (inputs["attention_mask"].long().cumsum(1) - 1).clamp(min=0)}
        out = backbone(**inputs, use_cache=False)
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        return last_token_pool(hidden, inputs["attention_mask"])

    @torch.no_grad()
    def _encode(self, modality: str, items: Sequence[Any]) -> torch.Tensor:
        return F.normalize(self.embed(self.inputs(modality, items)).float(), dim=-1)

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
