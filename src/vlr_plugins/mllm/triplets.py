"""Stage-II training data: NLI triplets as token ids of their EOL prompts, and their batches.

Each item is one triplet (:func:`vlr_plugins.data.nli.read_nli_triplets`): the sentence,
its positive and its hard negative, each cut to ``max_text_tokens`` (CaReBench and E5-V:
32) and put into the text EOL prompt. A batch holds every prompt of its triplets in one
left-padded block -- the B sentences, then their B positives, then the B hard negatives --
encoded in one pass, as CaReBench's trainer concatenates them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from vlr_plugins.data.nli import NLITriplet, read_nli_triplets
from vlr_plugins.mllm.embedder import chat_renderer
from vlr_plugins.mllm.prompt import EOLPrompt, load_eol_prompt, truncate_sentences

__all__ = ["EOLTripletsDataset", "collate_eol_triplets"]


def _load_processor(path: str) -> Any:
    """A tokenizer that can render the chat template: the folder's tokenizer when it has
    one, else its processor (whose chat template some MLLMs keep apart)."""
    from transformers import AutoProcessor, AutoTokenizer

    from vlr_plugins.errors import loading_pretrained

    with loading_pretrained(path, "tokenizer"):
        tok = AutoTokenizer.from_pretrained(path)
        if getattr(tok, "chat_template", None):
            return tok
        return AutoProcessor.from_pretrained(path)


class EOLTripletsDataset(Dataset):
    """NLI triplets -> ``{"ids": [sentence, positive(, hard negative)]}``, token ids of EOL prompts.

    ``ann_file``: SimCSE's CSV (or a list of :class:`~vlr_plugins.data.nli.NLITriplet`);
    ``tokenizer``: the model's folder / Hub id (its tokenizer or processor, loaded on first
    use so the dataset pickles cheaply into loader workers) or a loaded one; ``prompt``: the
    EOL prompt family (``care``; ``care_train`` reproduces CaReBench's released trainer);
    ``max_text_tokens``: each sentence's cut (32, ``cutoff_len``); ``hard_negatives``: keep
    the third sentence (CaReBench's ``--use_neg_sentence``).
    """

    def __init__(self, ann_file: str | os.PathLike[str] | Sequence[NLITriplet], tokenizer: Any,
                 prompt: str | os.PathLike[str] | EOLPrompt = "care", max_text_tokens: int | None = 32,
                 hard_negatives: bool = True, on_empty: str = "error") -> None:
        if isinstance(ann_file, (str, os.PathLike)):
            self.triplets = read_nli_triplets(ann_file, on_empty=on_empty)
            self.source = str(ann_file)
        else:
            self.triplets = [NLITriplet(*t) for t in ann_file]
            self.source = "<triplets>"
        self.hard_negatives = bool(hard_negatives)
        if self.hard_negatives and any(t.hard_neg is None for t in self.triplets):
            raise ValueError(f"{self.source}: hard_negatives=True, but the records have no hard_neg column "
                             f"(a sent0,sent1 file); set hard_negatives=False to train on pairs")
        self.prompt = load_eol_prompt(prompt)
        self.max_text_tokens = max_text_tokens
        self._tokenizer_path = None if not isinstance(tokenizer, (str, os.PathLike)) else str(tokenizer)
        self._processor = None if self._tokenizer_path else tokenizer

    @property
    def processor(self) -> Any:
        if self._processor is None:
            self._processor = _load_processor(self._tokenizer_path)
        return self._processor

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if self._tokenizer_path is not None:
            state["_processor"] = None
        return state

    def __len__(self) -> int:
        return len(self.triplets)

    def token_ids(self, sentences: Sequence[str]) -> list[list[int]]:
        """The EOL prompts of ``sentences`` as token ids, unpadded."""
        proc = self.processor
        tok = getattr(proc, "tokenizer", None) or proc
        prompts = self.prompt.render_texts(truncate_sentences(tok, sentences, self.max_text_tokens),
                                           chat=chat_renderer(proc, self.prompt.name))
        return tok(prompts)["input_ids"]

    def __getitem__(self, index: int) -> dict[str, Any]:
        t = self.triplets[index]
        texts = [t.sent0, t.sent1] + ([t.hard_neg] if self.hard_negatives else [])
        return {"ids": self.token_ids(texts)}


def collate_eol_triplets(batch: Sequence[dict[str, Any]], pad_token_id: int = 0) -> dict[str, Any]:
    """B items -> one left-padded block: ``input_ids`` / ``attention_mask`` (k * B, L), the B
    sentences first, then the B positives, then (k = 3) the B hard negatives;
    ``num_anchors`` = B. The pad id is never attended to, so its value does not matter."""
    width = {len(b["ids"]) for b in batch}
    if len(width) != 1:
        raise ValueError(f"collate_eol_triplets: items mix {sorted(width)} sentences each")
    k = width.pop()
    rows = [b["ids"][j] for j in range(k) for b in batch]
    length = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), length), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), length), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            input_ids[i, length - len(r):] = torch.tensor(r, dtype=torch.long)
            attention_mask[i, length - len(r):] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "num_anchors": len(batch)}
