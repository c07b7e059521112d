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

Importing this package needs only torch and PyYAML; transformers (``vlr-plugins[mllm]``)
is imported when a model is loaded. See docs/care.md.
"""

from vlr_plugins.mllm.embedder import MODEL_KINDS, EOLEmbedder, chat_renderer
from vlr_plugins.mllm.media_input import VideoInput, clip_pixels, image_pixels
from vlr_plugins.mllm.pooling import last_token_pool
from vlr_plugins.mllm.prompt import MODALITIES, EOLPrompt, list_eol_prompts, load_eol_prompt, truncate_sentences
from vlr_plugins.mllm.triplets import EOLTripletsDataset, collate_eol_triplets

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
]
