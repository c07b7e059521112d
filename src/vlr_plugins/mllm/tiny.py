"""A tiny random Qwen2-VL (and Qwen2 LM) built from configs, for trying CaRe's commands offline on
a CPU: ``mllm:`` evaluation, ``vlr lens``, ``vlr caption``, ``vlr train care/...``. Nothing is
downloaded: a byte-level tokenizer (every byte a token, plus Qwen2-VL's special tokens), a
Qwen-style chat template, a 2-layer LM of width 32 and a 2-block vision tower; its outputs are
noise, so the numbers it gives mean only that the commands run.

    python -m vlr_plugins.mllm.tiny tiny-qwen2vl          # writes the transformers folder
    vlr lens --model tiny-qwen2vl --text "a dog runs"     # ... then any mllm: command on it (docs/care.md)
    python -m vlr_plugins.mllm.tiny --text-only tiny-lm   # a text-only Qwen2 LM, for `transformers serve`
                                                          # (the generate and CapST routes, docs/generate.md)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

__all__ = ["MAX_PIXELS", "QWEN_CHAT", "SPECIAL", "VLLM_SIZED", "byte_tokenizer", "main", "save_model_folder", "save_tiny_qwen2vl", "tiny_processor",
           "tiny_qwen2_lm", "tiny_qwen2vl", "tiny_qwen2vl_config"]

# Qwen2-VL's chat template, written for these tests: a default system turn, one
# <|vision_start|><|x_pad|><|vision_end|> per image / video part, the generation prompt
QWEN_CHAT = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
           "<|image_pad|>", "<|video_pad|>"]
# 56 x 56 frames at most: 2 x 2 merged patches of 28 px
MAX_PIXELS = 56 * 56


def byte_tokenizer(chat_template: str | None = QWEN_CHAT):
    """Every byte one token (a byte-level BPE without merges), plus Qwen2-VL's special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|endoftext|>", eos_token="<|im_end|>",
                                   chat_template=chat_template)


def tiny_processor(tokenizer=None):
    from transformers import Qwen2VLImageProcessor, Qwen2VLProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    tokenizer = tokenizer or byte_tokenizer()
    size = {"shortest_edge": 28 * 28, "longest_edge": MAX_PIXELS}
    return Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(size=size), tokenizer=tokenizer,
                            video_processor=Qwen2VLVideoProcessor(size=size), chat_template=QWEN_CHAT)


def tiny_qwen2vl_config(processor, hidden: int = 32, layers: int = 2, *, heads: int | None = None,
                        mrope_section: list[int] | None = None, max_positions: int = 2048, vision_dim: int = 16,
                        vision_heads: int = 2):
    """The config of :func:`tiny_qwen2vl`: ``hidden`` / ``layers`` of the LM (``heads`` attention
    heads, default hidden // 16, at least 2; half as many key-value heads), a 2-block vision tower
    of width ``vision_dim``."""
    from transformers import Qwen2VLConfig

    tok = processor.tokenizer
    heads = heads or max(2, hidden // 16)
    head_dim = hidden // heads
    if mrope_section is None:
        mrope_section = [1, 1, 2] if head_dim == 8 else [head_dim // 8, head_dim // 8, head_dim // 4]
    return Qwen2VLConfig(
        text_config=dict(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads // 2 or 1,
                         max_position_embeddings=max_positions,
                         rope_parameters={"rope_type": "default", "mrope_section": mrope_section,
                                          "rope_theta": 10000.0},
                         bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id),
        vision_config=dict(depth=2, embed_dim=vision_dim, hidden_size=hidden, num_heads=vision_heads, mlp_ratio=2,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2),
        image_token_id=processor.image_token_id, video_token_id=processor.video_token_id,
        vision_start_token_id=tok.convert_tokens_to_ids("<|vision_start|>"),
        vision_end_token_id=tok.convert_tokens_to_ids("<|vision_end|>"),
    )


# a size vLLM's attention kernels take (head size 64)
VLLM_SIZED = dict(hidden=128, heads=2, mrope_section=[8, 12, 12], max_positions=4096, vision_dim=64, vision_heads=1)


def tiny_qwen2vl(seed: int = 0, hidden: int = 32, layers: int = 2, **sizes):
    """``(model, processor)``: a random 2-layer Qwen2-VL (hidden 32, 2-block vision tower), eval
    mode; ``sizes`` as :func:`tiny_qwen2vl_config` takes them (e.g. ``**VLLM_SIZED``)."""
    from transformers import Qwen2VLForConditionalGeneration

    processor = tiny_processor()
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(tiny_qwen2vl_config(processor, hidden, layers, **sizes)).eval()
    return model, processor


def save_model_folder(folder, model, processor) -> Path:
    """``model`` and its processor (or tokenizer) saved as one transformers folder; returns it."""
    folder = Path(folder)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def save_tiny_qwen2vl(folder, seed: int = 0, dtype: torch.dtype | None = None, **sizes) -> Path:
    """:func:`tiny_qwen2vl` saved as a transformers folder (weights in ``dtype``, default float32),
    as ``mllm:`` specs, ``vlr caption`` and stage I load it; returns the folder."""
    model, processor = tiny_qwen2vl(seed, **sizes)
    return save_model_folder(folder, model.to(dtype) if dtype is not None else model, processor)


def tiny_qwen2_lm(seed: int = 0, hidden: int = 32, layers: int = 2):
    """``(model, tokenizer)``: a random Qwen2 causal LM (``layers`` of width ``hidden``, default 2 of
    32) over the byte tokenizer, with its chat template."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = byte_tokenizer()
    torch.manual_seed(seed)
    heads = max(2, hidden // 8)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads // 2,
                         bos_token_id=None,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return Qwen2ForCausalLM(config).eval(), tok


def main(argv: list[str] | None = None) -> int:
    """``python -m vlr_plugins.mllm.tiny OUT [--seed S] [--hidden H] [--layers L] [--text-only]``."""
    parser = argparse.ArgumentParser(prog="python -m vlr_plugins.mllm.tiny", description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the folder to write (must not exist, or be empty)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hidden", type=int, default=32, help="the LM's width (a multiple of 16)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--text-only", action="store_true",
                        help="a text-only Qwen2 causal LM (no vision tower), e.g. for `transformers serve`")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        print(f"error: {out}: already there (and not an empty folder); give a new folder", file=sys.stderr)
        return 2
    if args.hidden < 16 or args.hidden % 16 or args.layers < 1:
        print("error: --hidden must be a multiple of 16 (>= 16) and --layers >= 1", file=sys.stderr)
        return 2
    if args.text_only:
        save_model_folder(out, *tiny_qwen2_lm(args.seed, args.hidden, args.layers))
        print(f"wrote a random text-only Qwen2 LM (hidden {args.hidden}, {args.layers} layers) to {out}: "
              f"`transformers serve {out}` serves it as an OpenAI-compatible chat endpoint (docs/generate.md)")
        return 0
    save_tiny_qwen2vl(out, seed=args.seed, hidden=args.hidden, layers=args.layers)
    print(f"wrote a random Qwen2-VL (hidden {args.hidden}, {args.layers} layers) to {out}: "
          f"mllm:{out} in vlr eval / precompute, --model {out} in vlr lens / caption")
    return 0


if __name__ == "__main__":
    sys.exit(main())
