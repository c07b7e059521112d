"""A BERT-style whole-word WordPiece tokenizer built from a word list, offline; and
tokenising with a token budget per text (captions 77, paragraphs 128 in one batch).

The demo and the tests need a real Hugging Face tokenizer without downloading
``bert-base-uncased``; a closed-vocabulary one built from the words of a corpus
behaves the same way for a text encoder (``[CLS] ... [SEP]``, padding, truncation,
``save_pretrained`` / ``AutoTokenizer.from_pretrained``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

__all__ = ["SPECIAL_TOKENS", "PUNCTUATION", "build_wordpiece_tokenizer", "words_of", "token_ids_at_budgets",
           "pad_token_rows"]

#: BERT's special tokens, in id order: ``[PAD]`` is 0 as in ``bert-base-uncased``.
SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
#: Punctuation that BertPreTokenizer splits off as tokens of its own.
PUNCTUATION: tuple[str, ...] = (".", ",", ";", ":", "'", "-")

_WORD = re.compile(r"[^\W_]+")


def words_of(texts: Iterable[str]) -> set[str]:
    """The lowercased word tokens of ``texts``, split on anything not a letter or digit.

    Use it to collect the vocabulary of a corpus for :func:`build_wordpiece_tokenizer`.

    Example::

        >>> sorted(words_of(["A red car.", "two dogs-on the beach"]))
        ['a', 'beach', 'car', 'dogs', 'on', 'red', 'the', 'two']
    """
    words: set[str] = set()
    for text in texts:
        words.update(_WORD.findall(text.lower()))
    return words


def build_wordpiece_tokenizer(
    words: Iterable[str], *, lowercase: bool = True, model_max_length: int = 512
) -> PreTrainedTokenizerFast:
    """A BERT-style tokenizer whose vocabulary is exactly ``words`` (plus specials and punctuation).

    Vocabulary ids: ``[PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4``, then the sorted
    unique ``words`` (lowercased when ``lowercase``), then :data:`PUNCTUATION` not
    already present. Texts are normalised like BERT (``BertNormalizer``), split on
    whitespace and punctuation (``BertPreTokenizer``), and every word outside the
    vocabulary becomes one ``[UNK]``; single texts are wrapped as ``[CLS] $A [SEP]``.

    Returns a ``transformers.PreTrainedTokenizerFast`` so that
    ``tok(texts, truncation=True, max_length=L, padding=True, return_tensors="pt")``
    works and ``save_pretrained`` / ``AutoTokenizer.from_pretrained`` round-trip
    without network. (Not ``BertTokenizerFast``: in transformers 5 it rebuilds the
    normaliser from ``do_lower_case`` on reload, so ``lowercase=False`` would not
    survive the round trip.)

    Example::

        >>> tok = build_wordpiece_tokenizer(words_of(["a red car"]))  # doctest: +SKIP
        >>> tok.convert_ids_to_tokens(tok("A red bus.")["input_ids"])  # doctest: +SKIP
        ['[CLS]', 'a', 'red', '[UNK]', '.', '[SEP]']
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    if model_max_length < 2:
        raise ValueError(
            f"model_max_length must leave room for [CLS] and [SEP], found {model_max_length}"
        )
    unique = {w.lower() if lowercase else w for w in words}
    blank = sorted(w for w in unique if not w or w != w.strip() or any(c.isspace() for c in w))
    if blank:
        raise ValueError(
            f"vocabulary words must be non-empty and without whitespace, found {blank[:5]!r}"
        )
    tokens = list(SPECIAL_TOKENS)
    tokens += sorted(unique - set(SPECIAL_TOKENS) - set(PUNCTUATION))
    tokens += list(PUNCTUATION)
    vocab = {token: i for i, token in enumerate(tokens)}

    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    backend.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        model_max_length=model_max_length,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


def token_ids_at_budgets(tokenizer: Any, texts: Sequence[str], budgets: Sequence[int]) -> list[list[int]]:
    """Each text's token ids, cut at its own budget (special tokens included); one
    tokenizer call per distinct budget, results in the texts' order."""
    if len(texts) != len(budgets):
        raise ValueError(f"{len(texts)} texts but {len(budgets)} token budgets")
    out: list[list[int]] = [[] for _ in texts]
    by_budget: dict[int, list[int]] = {}
    for i, budget in enumerate(budgets):
        by_budget.setdefault(int(budget), []).append(i)
    for budget, idx in by_budget.items():
        enc = tokenizer([texts[i] for i in idx], truncation=True, max_length=budget)["input_ids"]
        for i, ids in zip(idx, enc):
            out[i] = list(ids)
    return out


def pad_token_rows(rows: Sequence[Sequence[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``input_ids`` (N, L) padded with ``pad_token_id`` to the longest row, and the
    matching ``attention_mask`` (1 on tokens, 0 on padding)."""
    length = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), length), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), length), dtype=torch.long)
    for i, r in enumerate(rows):
        input_ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        attention_mask[i, : len(r)] = 1
    return input_ids, attention_mask
