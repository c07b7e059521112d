"""Embeddings from multimodal LLMs under explicit one-word limitation (EOL) prompts: E5-V, CaRe.

* :class:`EOLEmbedder` -- a transformers MLLM (Qwen2-VL, Qwen2.5-VL, any chat MLLM with a
  processor) or a causal LM as a text / image / video encoder: the last token's hidden
  state under an EOL prompt, one prefill pass, left padding.
* :class:`EOLPrompt`, :func:`load_eol_prompt`, :func:`list_eol_prompts` -- the prompts as
  YAML data (``prompt_templates/``; a user's own file by path).
* :class:`VideoInput` -- frames, repetition and pixel limits of the clips it sees.
* :func:`last_token_pool` -- the pooling itself.
* :class:`EOLTripletsDataset`, :func:`collate_eol_triplets` -- stage-II training data: NLI
  triplets as EOL prompts, batched in one left-padded block.
* :class:`FineGrainedAlignment` (stage I: caption SFT, :func:`answer_token_loss`) and
  :class:`RetrievalAdaptation` (stage II / E5-V: EOL contrastive training) -- CaRe's two
  training stages as plain modules (MMEngine's ``CaptionSFTModel`` / ``EOLContrastiveModel``
  are these); what of the MLLM trains (:data:`FINETUNE_MODES`, :func:`vision_modules`,
  :func:`add_lora`, :data:`LORA_DEFAULTS`, :func:`enable_gradient_checkpointing`):
  :mod:`vlr_plugins.mllm.finetune`.
* :func:`logit_lens`, :func:`plot_lens` -- the top tokens of an embedding through the LM head
  (``vlr lens``, CaReBench Figure 5).
* :class:`VLLMEmbedder`, :class:`VLLMVideoCaptioner`, :func:`require_vllm` -- the same
  embeddings and captions by vLLM on GPUs (refused, saying why, without vLLM or a GPU).
* :func:`load_eol_embedder` -- an embedder from a model folder, Hub id or `vlr` export.
* :func:`load_mllm_embedder`, :class:`EOLImageEncoder` -- the model of an ``mllm:FOLDER[:PROMPT]``
  spec (read by :func:`vlr_plugins.specs.load_mllm_spec`), as ``vlr precompute --encoder`` and
  ``vlr eval --model`` take it (CaReBench evaluation).
* :data:`MODEL_DTYPES` -- the dtypes ``--model-dtype`` loads a model in (``auto``: the
  checkpoint's own); :mod:`vlr_plugins.mllm.model_dtype`.
* :class:`VideoCaptioner`, :class:`CaptionSettings`, :func:`load_caption_settings`,
  :class:`CaptionsFile`, :func:`caption_videos` -- detailed video captions (``vlr caption``),
  settings as data, written to a resumable, kill-safe JSON Lines file.

Names are resolved on first use, so ``import vlr_plugins.mllm`` imports no torch; its
modules need only torch and PyYAML, and transformers (``vlr-plugins[mllm]``) is imported
when a model is loaded. See docs/care.md.
"""

from __future__ import annotations

from vlr_plugins._lazy import lazy_exports

__all__ = [
    "EOLEmbedder",
    "MODEL_KINDS",
    "EOLPrompt",
    "MODALITIES",
    "load_eol_prompt",
    "list_eol_prompts",
    "VideoInput",
    "clip_pixels",
    "image_pixels",
    "last_token_pool",
    "chat_renderer",
    "truncate_sentences",
    "EOLTripletsDataset",
    "collate_eol_triplets",
    "FineGrainedAlignment",
    "answer_token_loss",
    "RetrievalAdaptation",
    "FINETUNE_MODES",
    "LORA_DEFAULTS",
    "VISION_MODULES",
    "add_lora",
    "enable_gradient_checkpointing",
    "vision_modules",
    "load_eol_embedder",
    "load_mllm_embedder",
    "EOLImageEncoder",
    "MODEL_DTYPES",
    "logit_lens",
    "plot_lens",
    "LensResult",
    "LensToken",
    "VideoCaptioner",
    "CaptionSettings",
    "CAPTION_PROMPT",
    "caption_prompt",
    "list_caption_settings",
    "load_caption_settings",
    "CaptionsFile",
    "CaptionRun",
    "caption_videos",
    "videos_in_folder",
    "VLLMEmbedder",
    "VLLMVideoCaptioner",
    "require_vllm",
]

_LAZY = {name: f"vlr_plugins.mllm.{module}" for module, names in {
    "caption_run": ("CaptionRun", "caption_videos", "videos_in_folder"),
    "caption_settings": ("CAPTION_PROMPT", "CaptionSettings", "caption_prompt", "list_caption_settings",
                         "load_caption_settings"),
    "captioner": ("VideoCaptioner",),
    "captions_file": ("CaptionsFile",),
    "care_stage1": ("FineGrainedAlignment", "answer_token_loss"),
    "care_stage2": ("RetrievalAdaptation",),
    "embedder": ("MODEL_KINDS", "EOLEmbedder", "chat_renderer"),
    "finetune": ("FINETUNE_MODES", "LORA_DEFAULTS", "VISION_MODULES", "add_lora",
                 "enable_gradient_checkpointing", "vision_modules"),
    "lens": ("LensResult", "LensToken", "logit_lens", "plot_lens"),
    "loading": ("load_eol_embedder",),
    "model_dtype": ("MODEL_DTYPES",),
    "model_spec": ("EOLImageEncoder", "load_mllm_embedder"),
    "media_input": ("VideoInput", "clip_pixels", "image_pixels"),
    "pooling": ("last_token_pool",),
    "prompt": ("MODALITIES", "EOLPrompt", "list_eol_prompts", "load_eol_prompt", "truncate_sentences"),
    "triplets": ("EOLTripletsDataset", "collate_eol_triplets"),
    "vllm_backend": ("VLLMEmbedder", "VLLMVideoCaptioner", "require_vllm"),
}.items() for name in names}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
