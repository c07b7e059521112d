"""vLLM as a bulk backend for MLLM embeddings and captions, on GPUs.

* :class:`VLLMEmbedder` -- EOL embeddings by vLLM's pooling runner: the prompts are
  rendered exactly as :class:`~vlr_plugins.mllm.EOLEmbedder` renders them (the model's chat
  template, the same EOL prompt file, sentences cut to ``max_text_tokens``), the clips are
  the same frames (:class:`~vlr_plugins.mllm.VideoInput`: sampler, repetition), and the
  pooler reads the last token's state and L2-normalises it (``pooling_type="LAST"``).
* :class:`VLLMVideoCaptioner` -- ``vlr caption --backend vllm``: the captioning prompt and
  the greedy / sampled settings of :class:`~vlr_plugins.mllm.CaptionSettings` as vLLM
  ``SamplingParams``.

vLLM is not a dependency of vlr-plugins and needs a CUDA GPU: :func:`require_vllm` refuses
with a message that says which is missing before anything is loaded. What vLLM does with
the pixel limits (``mm_processor_kwargs``) follows its own Qwen2-VL processor; the GPU test
(tests/mllm/test_vllm_backend.py) compares both backends' embeddings (cosine > 0.999).
An adapter export (LoRA) is refused: merge it first (``EOLContrastiveModel`` writes merged
full weights, or :func:`~vlr_plugins.hf.export_eol_embedder` without an adapter).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from vlr_plugins.errors import ConfigError
from vlr_plugins.mllm.media_input import VideoInput, clip_pixels

__all__ = ["VLLMEmbedder", "VLLMVideoCaptioner", "require_vllm"]

_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
# generation settings whose vLLM SamplingParams name differs from transformers'
_SAMPLING_NAMES = {"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens"}
_UNSUPPORTED = ("num_beams", "length_penalty", "no_repeat_ngram_size")


def require_vllm(option: str = "backend='vllm'") -> None:
    """Refuse (a :class:`~vlr_plugins.errors.ConfigError` naming ``option``) unless vLLM is
    importable and a CUDA GPU is visible."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        raise ConfigError(f"{option}: vLLM is not installed (pip install vllm, on a machine with a CUDA GPU); "
                          f"the transformers backend needs neither")
    if not torch.cuda.is_available():
        raise ConfigError(f"{option}: vLLM runs on CUDA GPUs and none is visible here; use the transformers "
                          f"backend")


def _frames_hwc(clip: torch.Tensor) -> Any:
    """``(T, 3, H, W)`` 0-255 pixels -> ``(T, H, W, 3)`` uint8 numpy, as vLLM takes a video."""
    return clip.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous().numpy()


def _pixel_kwargs(spec: VideoInput) -> dict[str, int]:
    return {k: v for k, v in (("min_pixels", spec.min_pixels), ("max_pixels", spec.max_pixels)) if v is not None}


def _llm(model: str, pooling: bool, dtype: str | None, engine_kwargs: dict[str, Any]) -> Any:
    from vllm import LLM

    kw = {"model": model, "dtype": dtype or "auto", "limit_mm_per_prompt": {"image": 1, "video": 1}, **engine_kwargs}
    if not pooling:
        return LLM(**kw)
    from vllm.config import PoolerConfig

    pooler = PoolerConfig(pooling_type="LAST", normalize=True)
    try:  # vLLM >= 0.10: runner + pooler_config
        return LLM(runner="pooling", pooler_config=pooler, **kw)
    except TypeError:  # older: task + override_pooler_config
        return LLM(task="embed", override_pooler_config=pooler, **kw)


class VLLMEmbedder:
    """EOL embeddings of ``model`` (a folder or Hub id, or a full-weights `vlr` export) by vLLM.

    ``prompt``: an EOL prompt family or file (default: an export's own, else ``care``);
    ``engine_kwargs`` go to ``vllm.LLM`` (``tensor_parallel_size``, ``gpu_memory_utilization``,
    ``max_model_len``, ...); the video settings (``num_frames``, ``frame_strategy``,
    ``frame_repeat``, ``min_pixels``, ``max_pixels``) override the prompt file's, as for
    :class:`~vlr_plugins.mllm.EOLEmbedder`. ``encode_text`` / ``encode_image`` / ``encode_video`` return
    ``(B, D)`` L2-normalised float32 on the CPU, as :class:`~vlr_plugins.mllm.EOLEmbedder`.

    Example::

        emb = VLLMEmbedder("path/to/CaRe-7B", dtype="bfloat16", tensor_parallel_size=2)
        videos = emb.encode_video(["a.mp4", "b.mp4"])
    """

    def __init__(self, model: str | os.PathLike[str], *, prompt: str | os.PathLike[str] | None = None,
                 dtype: str | None = None, max_text_tokens: int | None = None, num_frames: int | None = None,
                 frame_strategy: str | None = None, frame_repeat: int | None = None, min_pixels: int | None = None,
                 max_pixels: int | None = None, **engine_kwargs: Any) -> None:
        require_vllm("VLLMEmbedder")
        from transformers import AutoProcessor

        from vlr_plugins.mllm.embedder import chat_renderer
        from vlr_plugins.mllm.loading import export_prompt, export_settings
        from vlr_plugins.mllm.prompt import load_eol_prompt

        spec = os.fspath(model)
        settings = export_settings(spec) or {}
        if settings.get("adapter"):
            raise ConfigError(f"{spec}: an adapter export; vLLM's pooling runner takes full weights (export the "
                              f"merged model)")
        self.prompt = load_eol_prompt(prompt) if prompt is not None or not settings else \
            export_prompt(settings, os.path.join(spec, "config.json"))
        self.max_text_tokens = max_text_tokens if max_text_tokens is not None else settings.get("max_text_tokens")
        overrides = {"num_frames": num_frames, "strategy": frame_strategy, "frame_repeat": frame_repeat,
                     "min_pixels": min_pixels, "max_pixels": max_pixels}
        try:
            self.video_input = VideoInput(**{**self.prompt.video_input.__dict__,
                                             **{k: v for k, v in overrides.items() if v is not None}})
        except ValueError as e:
            raise ConfigError(f"VLLMEmbedder video settings: {e}") from None
        self.processor = AutoProcessor.from_pretrained(spec)
        self.tokenizer = getattr(self.processor, "tokenizer", None) or self.processor
        self._chat = chat_renderer(self.processor, self.prompt.name)
        image_processor = getattr(self.processor, "image_processor", None)
        self.image_mean = tuple(getattr(image_processor, "image_mean", None) or _CLIP_MEAN)
        self.image_std = tuple(getattr(image_processor, "image_std", None) or _CLIP_STD)
        engine_kwargs.setdefault("mm_processor_kwargs", _pixel_kwargs(self.video_input))
        self.llm = _llm(spec, True, dtype, engine_kwargs)

    def _media_tokens(self) -> dict[str, str]:
        return {k: t for k in ("image", "video") if (t := getattr(self.processor, f"{k}_token", None)) is not None}

    def _embed(self, requests: list[Any]) -> torch.Tensor:
        outputs = self.llm.embed(requests, use_tqdm=False)
        emb = torch.tensor([o.outputs.embedding for o in outputs], dtype=torch.float32)
        return torch.nn.functional.normalize(emb, dim=-1)

    def encode_text(self, texts: str | Sequence[str]) -> torch.Tensor:
        """``texts`` -> (B, D) L2-normalised float32."""
        from vlr_plugins.mllm.prompt import truncate_sentences

        texts = [texts] if isinstance(texts, str) else list(texts)
        prompts = self.prompt.render_texts(truncate_sentences(self.tokenizer, texts, self.max_text_tokens),
                                           chat=self._chat)
        return self._embed(list(prompts))

    def encode_image(self, images: Sequence[Any]) -> torch.Tensor:
        """Image paths or PIL images -> (B, D) L2-normalised float32."""
        from PIL import Image

        prompt = self.prompt.render("image", chat=self._chat, media_tokens=self._media_tokens())
        pil = [Image.open(x).convert("RGB") if isinstance(x, (str, os.PathLike)) else x for x in images]
        return self._embed([{"prompt": prompt, "multi_modal_data": {"image": im}} for im in pil])

    def encode_video(self, videos: Sequence[Any]) -> torch.Tensor:
        """Video paths or ``(T, 3, H, W)`` clips -> (B, D) L2-normalised float32 (frames as
        :class:`~vlr_plugins.mllm.VideoInput` says: sampler, count, repetition)."""
        prompt = self.prompt.render("video", chat=self._chat, media_tokens=self._media_tokens())
        clips = [_frames_hwc(clip_pixels(v, self.video_input, self.image_mean, self.image_std)) for v in videos]
        return self._embed([{"prompt": prompt, "multi_modal_data": {"video": c}} for c in clips])


class VLLMVideoCaptioner:
    """``vlr caption --backend vllm``: the captioning prompt of ``settings`` through vLLM's
    ``generate``; ``frames`` / ``caption_clips`` as :class:`~vlr_plugins.mllm.VideoCaptioner`."""

    backend = "vllm"

    def __init__(self, model: str | os.PathLike[str], settings: Any, *, dtype: str | None = None,
                 **engine_kwargs: Any) -> None:
        require_vllm("--backend vllm")
        from transformers import AutoProcessor

        from vlr_plugins.mllm.caption_settings import caption_prompt, load_caption_settings
        from vlr_plugins.mllm.loading import export_settings

        spec = os.fspath(model)
        if (export_settings(spec) or {}).get("adapter"):
            raise ConfigError(f"--model: {spec} is an adapter export; vLLM generates from full weights (export "
                              f"the merged model)")
        self.settings = load_caption_settings(settings)
        bad = [k for k in _UNSUPPORTED if k in self.settings.generation]
        if bad:
            raise ConfigError(f"{self.settings.source or self.settings.name}, key 'generation.{bad[0]}': "
                              f"vLLM's sampling has no such setting; use the transformers backend")
        processor = AutoProcessor.from_pretrained(spec)
        self.prompt = caption_prompt(processor, self.settings.prompt)
        image_processor = getattr(processor, "image_processor", None)
        self.image_mean = tuple(getattr(image_processor, "image_mean", None) or _CLIP_MEAN)
        self.image_std = tuple(getattr(image_processor, "image_std", None) or _CLIP_STD)
        engine_kwargs.setdefault("mm_processor_kwargs", _pixel_kwargs(self.settings.video_input))
        self.llm = _llm(spec, False, dtype, engine_kwargs)
        from vllm import SamplingParams

        generation = dict(self.settings.generation)
        greedy = not generation.pop("do_sample", False)
        params = {_SAMPLING_NAMES.get(k, k): v for k, v in generation.items()}
        if greedy:
            params.update(temperature=0.0)
            for k in ("top_p", "top_k"):
                params.pop(k, None)
        self.sampling = SamplingParams(**params)

    def frames(self, video: Any) -> torch.Tensor:
        return clip_pixels(video, self.settings.video_input, self.image_mean, self.image_std)

    def caption_clips(self, clips: Sequence[torch.Tensor]) -> list[str]:
        if not clips:
            return []
        requests = [{"prompt": self.prompt, "multi_modal_data": {"video": _frames_hwc(c)}} for c in clips]
        outputs = self.llm.generate(requests, self.sampling, use_tqdm=False)
        return [o.outputs[0].text.strip() for o in outputs]
