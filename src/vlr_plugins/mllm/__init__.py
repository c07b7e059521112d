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

Importing this package needs only torch and PyYAML; transformers (``vlr-plugins[mllm]``)
is imported when a model is loaded. See docs/care.md.
"""

from vlr_plugins.mllm.caption_run import CaptionRun, caption_videos, videos_in_folder
from vlr_plugins.mllm.caption_settings import (
    CAPTION_PROMPT,
    CaptionSettings,
    caption_prompt,
    list_caption_settings,
    load_caption_settings,
)
from vlr_plugins.mllm.captioner import VideoCaptioner
from vlr_plugins.mllm.captions_file import CaptionsFile
from vlr_plugins.mllm.care_stage1 import FineGrainedAlignment, answer_token_loss
from vlr_plugins.mllm.care_stage2 import RetrievalAdaptation
from vlr_plugins.mllm.embedder import MODEL_KINDS, EOLEmbedder, chat_renderer
from vlr_plugins.mllm.finetune import (
    FINETUNE_MODES,
    LORA_DEFAULTS,
    VISION_MODULES,
    add_lora,
    enable_gradient_checkpointing,
    vision_modules,
)
from vlr_plugins.mllm.lens import LensResult, LensToken, logit_lens, plot_lens
from vlr_plugins.mllm.loading import load_eol_embedder
from vlr_plugins.mllm.model_dtype import MODEL_DTYPES
from vlr_plugins.mllm.model_spec import EOLImageEncoder, load_mllm_embedder
from vlr_plugins.mllm.media_input import VideoInput, clip_pixels, image_pixels
from vlr_plugins.mllm.pooling import last_token_pool
from vlr_plugins.mllm.prompt import MODALITIES, EOLPrompt, list_eol_prompts, load_eol_prompt, truncate_sentences
from vlr_plugins.mllm.triplets import EOLTripletsDataset, collate_eol_triplets
from vlr_plugins.mllm.vllm_backend import VLLMEmbedder, VLLMVideoCaptioner, require_vllm

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
