"""The text model of ``vlr mine --model``, with the order it embeds a list of texts in (so a
slice of that order, embedded alone, is embedded in the very batches of the whole list)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from vlr_plugins.errors import UsageError

__all__ = ["TextEmbedder", "text_embedder"]


@dataclass
class TextEmbedder:
    """``embedder(texts, desc) -> (n, D)`` float32 on the CPU, in batches of ``batch_size``
    (a progress bar named ``desc`` unless ``progress=False``).

    ``length_sorted``: the batches are cut from the texts sorted longest first
    (:func:`~vlr_plugins.eval.encode.length_order`: checkpoints and ``blip:`` through their
    tokenizer, each batch padded to its longest text); otherwise from the texts as given.
    """

    embed: Callable[[Sequence[str], str, bool], torch.Tensor]
    batch_size: int
    length_sorted: bool

    def __call__(self, texts: Sequence[str], desc: str, progress: bool = True) -> torch.Tensor:
        return self.embed(texts, desc, progress)

    def order(self, texts: Sequence[str]) -> list[int]:
        """The order the batches of ``texts`` are cut from: consecutive ``batch_size`` runs of
        it, embedded alone, are the batches ``self(texts)`` makes."""
        from vlr_plugins.eval.encode import length_order

        return length_order(texts) if self.length_sorted else list(range(len(texts)))


def text_embedder(args: argparse.Namespace, device: str) -> TextEmbedder:
    """``--model`` loaded: a checkpoint or blip: through its tokenizer at ``--max-tokens``
    (default its positions), any other text model through ``encode_text``."""
    from vlr_plugins.eval.encode import encode_texts
    from vlr_plugins.eval.models import encode_with_model
    from vlr_plugins.specs import (
        load_checked_text_encoder,
        load_text_model,
        load_text_tokenizer,
        refuse_tokenizer_options,
        text_model_source,
    )

    if text_model_source(args.model) == "checkpoint":
        encoder = load_checked_text_encoder(args.model, "--model").to(device)
        tokenizer = load_text_tokenizer(args.tokenizer, encoder, args.model)
        positions = getattr(encoder, "max_positions", None)
        if args.max_tokens is not None and positions is not None and args.max_tokens > positions:
            raise UsageError("--max-tokens", f"{args.max_tokens} exceeds the text encoder's {positions} positions")
        budget = args.max_tokens or positions or 77
        return TextEmbedder(lambda texts, desc, progress: encode_texts(
            encoder, tokenizer, texts, budget, batch_size=args.batch_size, device=device, desc=desc, progress=progress),
                            args.batch_size, length_sorted=True)
    refuse_tokenizer_options(args.model, {"--tokenizer": args.tokenizer})
    model = load_text_model(args.model, setting="--model", device=device, dtype=args.model_dtype)
    return TextEmbedder(lambda texts, desc, progress: encode_with_model(
        model, texts, max_tokens=args.max_tokens, batch_size=args.batch_size, desc=desc, progress=progress),
                        args.batch_size, length_sorted=False)
