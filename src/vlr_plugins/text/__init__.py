"""Text side: the BLIP text encoder, MVC's dual-CLS text encoder, tokenizers, text-length
extension and length-grouped encoding of mixed-length batches.

Names are resolved on first use, so ``import vlr_plugins.text`` needs neither torch,
``transformers`` nor ``tokenizers``.
"""

from __future__ import annotations

from vlr_plugins._lazy import lazy_exports

__all__ = [
    "BlipTextEncoder",
    "DualCLSTextEncoder",
    "DualCLSTextOutput",
    "VIEWS",
    "VideoCrossAttention",
    "build_wordpiece_tokenizer",
    "check_length_blocks",
    "encode_in_length_blocks",
    "extend_text_context",
    "freeze_leading_rows",
    "length_block_bounds",
    "load_blip_text_encoder",
    "load_text_encoder_checkpoint",
    "load_tokenizer",
    "stretch_positional_embedding",
    "tokenizer_for_length",
    "words_of",
]

_LAZY = {
    "BlipTextEncoder": "vlr_plugins.text.blip_text_encoder",
    "DualCLSTextEncoder": "vlr_plugins.text.dual_cls",
    "DualCLSTextOutput": "vlr_plugins.text.dual_cls",
    "VIEWS": "vlr_plugins.text.view_names",
    "VideoCrossAttention": "vlr_plugins.text.video_cross_attention",
    "extend_text_context": "vlr_plugins.text.length",
    "tokenizer_for_length": "vlr_plugins.text.length",
    "load_blip_text_encoder": "vlr_plugins.text.load",
    "load_text_encoder_checkpoint": "vlr_plugins.text.load",
    "freeze_leading_rows": "vlr_plugins.text.positions",
    "stretch_positional_embedding": "vlr_plugins.text.positions",
    "build_wordpiece_tokenizer": "vlr_plugins.text.tokenizer",
    "check_length_blocks": "vlr_plugins.text.length_blocks",
    "encode_in_length_blocks": "vlr_plugins.text.length_blocks",
    "length_block_bounds": "vlr_plugins.text.length_blocks",
    "load_tokenizer": "vlr_plugins.text.pretrained",
    "words_of": "vlr_plugins.text.tokenizer",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
