"""The MLLM member of the vlr retrieval family: EOL-prompt embeddings (CaRe, E5-V) of an exported folder.

An export of an MLLM embedder (``vlr_plugins.hf.export_eol_embedder``) is the model's own
transformers folder -- its ``config.json``, weights (or a LoRA adapter in ``adapter/`` that
names its base model) and processor, loadable as they always were -- plus this file, a
``vlr_eol`` block in ``config.json`` (the EOL prompts, how clips reach the processor, the
adapter's base) and ``auto_map: {"AutoModel": "modeling_vlr_eol.VlrEOLEmbeddingModel"}``. So
``AutoModel.from_pretrained(folder, trust_remote_code=True)`` returns a
:class:`VlrEOLEmbeddingModel`, whose ``encode_text`` / ``encode_image`` / ``encode_video`` give
the same unit-norm embeddings as vlr-plugins' ``EOLEmbedder``: the last layer's hidden state
at the last token of the EOL prompt, batches padded on the left.

This file is copied beside exported weights and imported where vlr-plugins is not
installed: it imports only ``torch`` and ``transformers`` (and ``peft`` for an adapter
export), so it restates the little of ``vlr_plugins.mllm`` it needs (prompt rendering,
frame repetition, pooling); tests check that both give the same embeddings.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["VlrEOLEmbeddingModel"]

_SENTENCE = "<sent>"
_MEDIA = {"image": "<image>", "video": "<video>"}
# arguments of the Hub (where files come from), as opposed to arguments of the model
_HUB_KWARGS = ("cache_dir", "force_download", "local_files_only", "proxies", "revision", "subfolder", "token")
# what AutoModel adds on its way here; none of it concerns the inner model
_AUTO_KWARGS = ("_from_auto", "adapter_kwargs", "trust_remote_code", "code_revision")
# sentence-transformers' bookkeeping keys, which a forward of the backbone does not take
_NOT_MODEL_INPUTS = ("modality", "prompt_length", "num_images_per_sample", "num_videos_per_sample", "task",
                     "return_dict")


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


class VlrEOLEmbeddingModel(nn.Module):
    """An MLLM (or LLM) as a text / image / video encoder under explicit one-word limitation prompts.

    ``model``: the transformers model (``AutoModelForImageTextToText`` or
    ``AutoModelForCausalLM``); ``processor``: its processor (or tokenizer); ``settings``:
    the ``vlr_eol`` block of the exported ``config.json``.

    Formula: ``emb(x) = normalize(h_L[last])``, ``h_L`` the last hidden states (after the
    final norm) of the EOL prompt that holds ``x``; batches are padded on the left, so
    ``last`` is the last column. Reference: E5-V (Jiang et al., 2024); CaRe (Xu et al.,
    CaReBench, 2025, sec. 4.2).

    ``forward(**inputs)`` is the backbone's forward (``last_hidden_state``), which is what
    sentence-transformers' ``Transformer`` module calls.

    Example::

        model = AutoModel.from_pretrained("me/care-7b", trust_remote_code=True, dtype="bfloat16")
        t = model.encode_text(["A man slices a watermelon."])        # (1, D), unit norm
        v = model.encode_video([frames])                              # frames: (T, 3, H, W) uint8
        (t @ v.T).item()
    """

    def __init__(self, model: nn.Module, processor: Any, settings: dict[str, Any]) -> None:
        super().__init__()
        self.model = model
        self.processor = processor
        self.settings = dict(settings)
        self.tokenizer = getattr(processor, "tokenizer", None) or processor
        self.prompt = dict(self.settings["prompt"])
        self.video_input = dict(self.settings.get("video_input") or {})
        self.kind = self.settings.get("kind", "mllm")
        image_processor = getattr(processor, "image_processor", None)
        self.image_mean = tuple(getattr(image_processor, "image_mean", None) or (0.48145466, 0.4578275, 0.40821073))
        self.image_std = tuple(getattr(image_processor, "image_std", None) or (0.26862954, 0.26130258, 0.27577711))

    # ------------------------------------------------------------------ loading

    @classmethod
    def register_for_auto_class(cls, auto_class: str = "AutoModel") -> None:
        """Called by ``AutoModel`` before loading; the folder's ``auto_map`` already names this class."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike[str], *args: Any,
                        config: Any = None, merge_adapter: bool = True, **kwargs: Any) -> VlrEOLEmbeddingModel:
        """Load an exported folder (or Hub id): its MLLM with its own Auto class, its processor,
        and for an adapter export the base model named in ``vlr_eol.base_model`` with the
        LoRA adapter of ``adapter/`` (merged into the weights unless ``merge_adapter=False``).

        Model arguments (``dtype``, ``device_map``, ``attn_implementation``, ...) go to the MLLM;
        Hub arguments (``revision``, ``token``, ``cache_dir``, ...) to every file read.
        """
        import transformers as tf

        path = os.fspath(pretrained_model_name_or_path)
        for key in _AUTO_KWARGS:
            kwargs.pop(key, None)
        hub = {k: kwargs.pop(k) for k in _HUB_KWARGS if k in kwargs}
        if config is None:
            config = tf.AutoConfig.from_pretrained(path, **hub)
        settings = getattr(config, "vlr_eol", None)
        if not isinstance(settings, dict) or "prompt" not in settings:
            raise ValueError(f"{path}: config.json has no 'vlr_eol' block; this is not an exported EOL embedder")
        kind = settings.get("kind", "mllm")
        model_cls = tf.AutoModelForImageTextToText if kind == "mllm" else tf.AutoModelForCausalLM
        adapter = settings.get("adapter")
        if adapter:
            base = settings.get("base_model")
            if not base:
                raise ValueError(f"{path}: vlr_eol.adapter is set but vlr_eol.base_model names no base model")
            base_hub = {k: v for k, v in hub.items() if k not in ("revision", "subfolder")}
            model = model_cls.from_pretrained(base, *args, config=config, **base_hub, **kwargs)
            try:
                from peft import PeftModel
            except ImportError:
                raise ImportError(f"{path} holds a LoRA adapter over {base}: loading it needs `pip install peft`") \
                    from None
            # the adapter's folder sits inside the caller's subfolder, if one was given (AutoModel may
            # pass its own, possibly empty, subfolder on)
            inner = "/".join(p for p in (hub.get("subfolder"), adapter) if p)
            peft_hub = {k: v for k, v in hub.items() if k != "subfolder"}
            model = PeftModel.from_pretrained(model, path, subfolder=inner, **peft_hub)
            if merge_adapter:
                model = model.merge_and_unload()
        else:
            model = model_cls.from_pretrained(path, *args, config=config, **hub, **kwargs)
        loader = tf.AutoProcessor if kind == "mllm" else tf.AutoTokenizer
        processor = loader.from_pretrained(path, **hub)
        return cls(model.eval(), processor, settings)

    # ------------------------------------------------------------------ attributes

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def embedding_dim(self) -> int:
        """D: the language model's hidden size."""
        config = self.model.config
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        return int(text.hidden_size)

    def get_input_embeddings(self) -> nn.Module:
        return self.model.get_input_embeddings()

    # ------------------------------------------------------------------ prompts

    def _chat(self, messages: list[dict[str, Any]]) -> str:
        for owner in (self.processor, getattr(self.processor, "tokenizer", None)):
            if getattr(owner, "chat_template", None):
                return owner.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        raise ValueError(f"EOL prompt {self.prompt.get('name')!r} is written for a chat template, and neither the "
                         "processor nor the tokenizer has one")

    def prompts(self, modality: str, sentences: Sequence[str] = (), count: int = 0) -> list[str]:
        """The rendered EOL prompts: one per sentence (``text``), or ``count`` copies (image, video)."""
        template = self.prompt.get(modality)
        if template is None:
            raise ValueError(f"this model's EOL prompt {self.prompt.get('name')!r} has no {modality} prompt")
        if self.prompt.get("chat_template", True):
            rendered = self._chat([{"role": "user", "content": _content(template)}])
        else:
            rendered = template
            for kind, placeholder in _MEDIA.items():
                if placeholder in rendered:
                    token = getattr(self.processor, f"{kind}_token", None)
                    if token is None:
                        raise ValueError(f"the processor names no {kind} token to put in place of {placeholder}")
                    rendered = rendered.replace(placeholder, token)
        if modality != "text":
            sentences = [""] * count
        elif self.settings.get("max_text_tokens"):
            ids = self.tokenizer(list(sentences), add_special_tokens=False, truncation=True,
                                 max_length=int(self.settings["max_text_tokens"]))["input_ids"]
            sentences = [self.tokenizer.decode(row) for row in ids]
        filled = [rendered.replace(_SENTENCE, s) for s in sentences]
        return [f.strip() for f in filled] if self.prompt.get("strip") else filled

    # ------------------------------------------------------------------ inputs

    def _pixels(self, x: torch.Tensor) -> torch.Tensor:
        """uint8 pixels as they are; float pixels taken as normalised with image_mean / image_std."""
        if x.dtype == torch.uint8:
            return x.cpu()
        if not x.dtype.is_floating_point:
            raise ValueError(f"pixels must be uint8 (0-255) or float (normalised), found {x.dtype}")
        mean = torch.tensor(self.image_mean, dtype=torch.float32).view(3, 1, 1)
        std = torch.tensor(self.image_std, dtype=torch.float32).view(3, 1, 1)
        return ((x.float().cpu() * std + mean) * 255).clamp(0, 255)

    def _clip(self, video: Any) -> torch.Tensor:
        if not isinstance(video, torch.Tensor) or video.ndim != 4 or video.shape[1] != 3:
            raise TypeError("a video is a (T, 3, H, W) tensor of frames (decode the file first; the frames "
                            f"this model was evaluated with: {self.video_input})")
        frames = self._pixels(video)
        repeat = int(self.video_input.get("frame_repeat") or 1)
        return frames.repeat_interleave(repeat, dim=0) if repeat > 1 else frames

    def _image(self, image: Any) -> Any:
        if isinstance(image, (str, os.PathLike)):
            from PIL import Image

            with Image.open(image) as im:
                return im.convert("RGB")
        if isinstance(image, torch.Tensor):
            if image.ndim != 3 or image.shape[0] != 3:
                raise ValueError(f"an image tensor must be (3, H, W), found shape {tuple(image.shape)}")
            return self._pixels(image)
        return image

    def _video_kwargs(self) -> dict[str, Any]:
        proc = getattr(self.processor, "video_processor", None)
        kw: dict[str, Any] = {}
        low, high = self.video_input.get("min_pixels"), self.video_input.get("max_pixels")
        if low is not None or high is not None:
            size = dict(getattr(proc, "size", None) or {})
            if low is not None:
                size["shortest_edge"] = low
            if high is not None:
                size["longest_edge"] = high
            kw["size"] = size
        if hasattr(proc, "cap_pixels_per_frame"):
            kw["cap_pixels_per_frame"] = False
        if hasattr(proc, "do_sample_frames"):
            kw["do_sample_frames"] = False
        return kw

    def inputs(self, modality: str, items: Sequence[Any]) -> dict[str, torch.Tensor]:
        """The model inputs of one modality's batch, left-padded, on the model's device."""
        items = list(items)
        if not items:
            raise ValueError(f"no {modality} to encode (an empty batch)")
        kw: dict[str, Any] = {"padding": True, "padding_side": "left", "return_tensors": "pt"}
        if modality == "text":
            if not all(isinstance(t, str) for t in items):
                raise TypeError("encode_text takes strings (images and videos go to encode_image / encode_video)")
            text = self.prompts("text", items)
            if self.kind == "llm":
                batch = self.tokenizer(text, return_token_type_ids=False, **kw)
            else:
                batch = self.processor(text=text, **kw)
        elif self.kind == "llm":
            raise ValueError(f"a text-only model cannot encode {modality}s")
        elif modality == "image":
            batch = self.processor(text=self.prompts("image", count=len(items)),
                                   images=[self._image(x) for x in items], **kw)
        elif modality == "video":
            batch = self.processor(text=self.prompts("video", count=len(items)),
                                   videos=[self._clip(x) for x in items], **kw, **self._video_kwargs())
        else:
            raise ValueError(f"modality must be text, image or video, found {modality!r}")
        return {k: v.to(self.device) for k, v in batch.items() if isinstance(v, torch.Tensor)}

    # ------------------------------------------------------------------ embedding

    def _backbone(self) -> nn.Module:
        return self.model.base_model if hasattr(self.model, "base_model") else self.model

    def forward(self, **inputs: Any) -> Any:
        """The backbone's forward (no LM head): an output with ``last_hidden_state`` (B, L, D)."""
        inputs = {k: v for k, v in inputs.items() if k not in _NOT_MODEL_INPUTS}
        if ("position_ids" not in inputs and "attention_mask" in inputs
                and not any(k.startswith("pixel_values") for k in inputs)):
            # a text batch: positions count real tokens only, so a left-padded row matches it
            # unpadded (Qwen2-VL positions its text-only rows over the padding)
            inputs["position_ids"] = (inputs["attention_mask"].long().cumsum(1) - 1).clamp(min=0)
        return self._backbone()(**inputs, use_cache=False)

    def embed(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """(B, D) last-token states of prepared, left-padded inputs (:meth:`inputs`), not normalised."""
        return self.forward(**inputs).last_hidden_state[:, -1]

    @torch.no_grad()
    def _encode(self, modality: str, items: Sequence[Any]) -> torch.Tensor:
        return F.normalize(self.embed(self.inputs(modality, items)).float(), dim=-1)

    def encode_text(self, texts: str | Sequence[str]) -> torch.Tensor:
        """``texts`` -> (B, D) unit-norm float32."""
        return self._encode("text", [texts] if isinstance(texts, str) else texts)

    def encode_image(self, images: Any) -> torch.Tensor:
        """``images``: (B, 3, H, W), or a list of paths / PIL images / (3, H, W) tensors -> (B, D)."""
        if isinstance(images, torch.Tensor) and images.ndim == 4:
            images = list(images)
        return self._encode("image", images if isinstance(images, (list, tuple)) else [images])

    def encode_video(self, videos: Any) -> torch.Tensor:
        """``videos``: (B, T, 3, H, W), or a list of (T, 3, H, W) frame tensors (uint8 pixels,
        or floats normalised with ``image_mean`` / ``image_std``) -> (B, D); every frame is
        repeated ``video_input.frame_repeat`` times, as in training."""
        if isinstance(videos, torch.Tensor) and videos.ndim == 5:
            videos = list(videos)
        return self._encode("video", videos if isinstance(videos, (list, tuple)) else [videos])
