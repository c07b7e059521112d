"""A deterministic bag-of-words text model for CLI tests (``--model _bow_model:BagOfWords``):
each word hashes (crc32) to a fixed random direction in 24 dimensions; a text is the sum of
its words' directions. Texts sharing words score high, so mining has structure to find."""

from __future__ import annotations

import zlib

import torch

DIM = 24


class BagOfWords:
    embed_dim = DIM

    def encode_text(self, texts):
        out = torch.zeros(len(texts), DIM)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                g = torch.Generator().manual_seed(zlib.crc32(word.encode()))
                out[row] += torch.randn(DIM, generator=g)
            out[row] += 1e-3 * torch.randn(DIM, generator=torch.Generator().manual_seed(zlib.crc32(text.encode())))
        return out
