"""QB-Norm's query banks as ``vlr eval --renorm qbnorm`` reads them, and how a report names a renorm.

QB-Norm (Bogolin et al., CVPR 2022) normalises a test query's scores by a bank of queries *of
the same direction* from the training set: for text-to-video (the usual case) the bank is the
training captions, embedded by the text model under evaluation; for video-to-text a bank of
training videos' embeddings. So:

* a **text bank** (:func:`read_text_bank`) is a file of texts, which the model encodes like the
  benchmark's own texts (at each benchmark's token budget and text view):

  - ``.txt``: one text per line (blank lines skipped);
  - ``.jsonl`` / ``.json``, read by its first record: JSON strings (one text a line); objects with
    ``"text"``; a retrieval split ``{"id", "texts": [...]}`` (every text); paragraph samples
    ``{"id", "caption", ...}`` (each ``caption``); MVC samples ``{"id", "video", ...}`` (the
    summary captions ``O``, ``S1``, ``S2`` each has);
  - ``.parquet`` / ``.csv`` / ``.tsv``: paragraph samples (each ``caption``);
  - of sample records, ``--query-bank-fields`` chooses the texts instead: a paragraph sample's
    ``caption``, ``paragraph`` and / or ``positives`` (a bank of training paragraphs for
    paragraph queries), an MVC sample's caption fields (e.g. ``D1*,D2*`` for detailed queries);

* an **item bank** (:func:`read_item_bank`) is an embedding store (``vlr precompute`` output):
  every row, as wide as the benchmarks' item embeddings.

:class:`QueryBanks` holds them with ``beta`` and ``k`` until the text bank is encoded
(:meth:`QueryBanks.resolve` -> :class:`~vlr_plugins.eval.renorm.QueryBankNorm`);
:func:`renorm_sentence` is the line a report prints under a table.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from vlr_plugins.errors import ConfigError, DataFormatError, UsageError

__all__ = ["ItemBank", "PARAGRAPH_BANK_FIELDS", "QueryBanks", "TEXT_BANK_SUFFIXES", "TextBank", "check_bank_dim", "check_renorm", "read_item_bank",
           "read_text_bank", "renorm_sentence"]

TEXT_BANK_SUFFIXES = (".txt", ".jsonl", ".json", ".parquet", ".csv", ".tsv")
_KINDS = ("a JSON string, an object with \"text\", a retrieval split {\"id\", \"texts\"}, a paragraph sample "
          "{\"id\", \"caption\", ...} or an MVC sample {\"id\", \"video\", ...}")


@dataclass(frozen=True)
class TextBank:
    """Texts of a text-to-item bank, read from ``path`` (its ``format`` said in the record)."""

    texts: tuple[str, ...] = field(repr=False)
    path: str
    format: str

    def record(self) -> dict:
        return {"path": self.path, "format": self.format, "texts": len(self.texts)}


@dataclass(frozen=True)
class ItemBank:
    """Embeddings (B, D) of an item-to-text bank, every row of the store at ``path``, and
    the store's ``ids`` of them (``()`` when not known)."""

    embeddings: torch.Tensor = field(repr=False)
    path: str
    ids: tuple[str, ...] = field(default=(), repr=False)

    def record(self) -> dict:
        return {"path": self.path, "items": len(self.embeddings), "dim": int(self.embeddings.shape[1])}

    def shared_with(self, item_ids: Sequence[str], store: Any, chunk: int = 4096) -> int:
        """How many of the bank's items are among a benchmark's: the same id as one of
        ``item_ids``, or a row equal (in float32) to the embedding ``store`` holds for one
        of them (the same item stored under another name). The test rows are read ``chunk``
        at a time and compared by a digest of their bytes, the bank's kept as one digest a row."""
        ids = set(item_ids)
        bank = {}  # digest -> the bank rows holding it
        for row, digest in enumerate(_row_digests(self.embeddings)):
            bank.setdefault(digest, []).append(row)
        shared = {row for row, i in enumerate(self.ids) if i in ids}
        ordered = list(item_ids)
        for start in range(0, len(ordered), chunk):
            for digest in _row_digests(store.get(ordered[start:start + chunk])):
                shared.update(bank.get(digest, ()))
        return len(shared)


def _lines(path: str) -> list[str]:
    from vlr_plugins.data._text_files import utf8_lines

    return [line.strip() for _, line in utf8_lines(path) if line.strip()]


def _json_texts(path: str, fields: Sequence[str] | None = None) -> tuple[list[str], str]:
    """The texts of a JSON Lines bank, by the kind of its first record (``fields``: of sample records)."""
    from vlr_plugins.data._text_files import json_lines

    records = json_lines(path)
    first = next(records, None)
    if first is None:
        return [], "JSON Lines"
    line_no, record = first
    if isinstance(record, dict) and "texts" in record:
        from vlr_plugins.data.retrieval_set import read_retrieval_jsonl

        return list(read_retrieval_jsonl(path).texts), "retrieval split"
    if isinstance(record, dict) and "video" in record:
        from vlr_plugins.data.mvc_samples import MVC_SUMMARY_FIELDS, MVC_TEXT_FIELDS, read_mvc_samples

        chosen = tuple(fields or MVC_SUMMARY_FIELDS)
        _check_fields(chosen, tuple(MVC_TEXT_FIELDS), "MVC samples", path)
        texts = [t for s in read_mvc_samples(path) for f in chosen for t in s.texts(f)]
        return texts, "MVC samples" + (f" ({', '.join(chosen)})" if fields else "")
    if isinstance(record, dict) and "caption" in record:
        from vlr_plugins.data.sample import read_paragraph_samples

        return _paragraph_texts(read_paragraph_samples(path), fields, path)
    if not isinstance(record, str) and not (isinstance(record, dict) and "text" in record):
        raise DataFormatError(path, f"expected {_KINDS}, found {json.dumps(record)[:80]}", record=line_no)
    key = "text" if isinstance(record, dict) else None
    texts = []
    for line_no, record in [first, *records]:
        text = (record.get(key) if isinstance(record, dict) else None) if key else record
        if not isinstance(text, str) or not text.strip():
            expected = 'an object with a non-empty string "text"' if key else "a non-empty JSON string"
            raise DataFormatError(path, f"expected {expected}, as line {first[0]} holds; found "
                                        f"{json.dumps(record)[:80]}", record=line_no)
        texts.append(text)
    return texts, "JSON Lines"


#: the fields of a paragraph sample a text bank may take (``caption`` by default)
PARAGRAPH_BANK_FIELDS = ("caption", "paragraph", "positives")
_FIELDS_OPTION = "--query-bank-fields"


def _check_fields(fields: Sequence[str], known: Sequence[str], kind: str, path: str) -> None:
    import difflib

    for name in fields:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UsageError(_FIELDS_OPTION, f"{path} holds {kind}, which have no text field {name!r} (theirs: "
                                             f"{', '.join(known)}){hint}")


def _paragraph_texts(samples: Sequence[Any], fields: Sequence[str] | None, path: str) -> tuple[list[str], str]:
    """Each sample's texts of ``fields`` (default: its caption), sample by sample."""
    fields = tuple(fields or ("caption",))
    _check_fields(fields, PARAGRAPH_BANK_FIELDS, "paragraph samples", path)
    texts = []
    for sample in samples:
        for name in fields:
            value = getattr(sample, name)
            texts.extend(value if isinstance(value, tuple) else [value] if value else [])
    return texts, "paragraph samples" + (f" ({', '.join(fields)})" if fields != ("caption",) else "")


def read_text_bank(path: str | os.PathLike[str], option: str = "--query-bank-texts",
                   fields: Sequence[str] | None = None) -> TextBank:
    """The texts of the text bank at ``path`` (module docstring); a missing, unreadable or
    empty file is one :class:`~vlr_plugins.errors.UserError` naming ``option`` or the file's line.

    ``fields``: which texts of sample records form the bank: of paragraph samples any of
    :data:`PARAGRAPH_BANK_FIELDS` (default ``caption``: for paragraph queries, ``paragraph``),
    of MVC samples any caption field (default the summaries ``O``, ``S1``, ``S2``: for detailed
    queries, e.g. ``D1*,D2*``); a bank of plain texts or a retrieval split has no fields."""
    path = os.fspath(path)
    suffix = Path(path).suffix.lower()
    if os.path.isdir(path):
        raise UsageError(option, f"{path} is a folder; a text bank is a file of texts ({', '.join(TEXT_BANK_SUFFIXES)})"
                                 ", and a bank of stored item embeddings goes to --query-bank-items")
    if not os.path.isfile(path):
        raise UsageError(option, f"no such file: {path}")
    if suffix not in TEXT_BANK_SUFFIXES:
        raise UsageError(option, f"{path}: expected a file of texts ending in {', '.join(TEXT_BANK_SUFFIXES)}")
    if suffix == ".txt":
        texts, kind = _lines(path), "text lines"
    elif suffix in (".jsonl", ".json"):
        texts, kind = _json_texts(path, fields)
    else:
        from vlr_plugins.data.sample import read_paragraph_samples

        texts, kind = _paragraph_texts(read_paragraph_samples(path), fields, path)
    if fields and not kind.startswith(("paragraph samples", "MVC samples")):
        raise UsageError(_FIELDS_OPTION, f"{path} holds {kind}, which have no fields to choose: it applies to "
                                         "a bank of paragraph or MVC samples")
    if not texts:
        raise UsageError(option, f"{path} holds no texts ({kind}): a query bank needs at least one")
    return TextBank(tuple(texts), path, kind)


def read_item_bank(path: str | os.PathLike[str], option: str = "--query-bank-items") -> ItemBank:
    """Every row of the embedding store at ``path``; a missing or empty store is a
    :class:`~vlr_plugins.errors.UsageError` naming ``option``."""
    from vlr_plugins.data.embedding_store import EmbeddingStore

    path = os.fspath(path)
    if os.path.isfile(path):
        raise UsageError(option, f"{path} is a file; an item bank is an embedding store folder (`vlr precompute` "
                                 "output), and a file of texts goes to --query-bank-texts")
    if not os.path.isfile(os.path.join(path, "index.json")):
        raise UsageError(option, f"no embedding store at {path} (no index.json; `vlr precompute` writes one)")
    store = EmbeddingStore(path)
    if len(store) == 0:
        raise UsageError(option, f"the embedding store {path} holds no embeddings: a query bank needs at least one")
    ids = tuple(store.ids)
    return ItemBank(store.get(list(ids)), path, ids)


def _row_digests(rows: torch.Tensor) -> list[bytes]:
    """A BLAKE2b digest of each row's float32 bytes (-0.0 as 0.0)."""
    import hashlib

    rows = (rows.detach().to("cpu", torch.float32) + 0.0).contiguous().numpy()
    return [hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in rows]


@dataclass(frozen=True)
class QueryBanks:
    """QB-Norm's setting before the text bank is encoded: ``texts`` (text-to-item queries),
    ``items`` (item-to-text queries), either or both; ``beta`` and ``k`` as in
    :class:`~vlr_plugins.eval.renorm.QueryBankNorm`."""

    texts: TextBank | None = None
    items: ItemBank | None = None
    beta: float = 20.0
    k: int = 1

    def resolve(self, encode: Callable[[list[str]], torch.Tensor]) -> Any:
        """The :class:`~vlr_plugins.eval.renorm.QueryBankNorm`, the text bank encoded by ``encode``."""
        from vlr_plugins.eval.renorm import QueryBankNorm

        text_bank = None if self.texts is None else encode(list(self.texts.texts)).float().cpu()
        return QueryBankNorm(text_bank=text_bank, item_bank=None if self.items is None else self.items.embeddings,
                             beta=self.beta, k=self.k)

    def record(self) -> dict:
        """The top-level record of a report: the engine's, with where each bank came from."""
        return {"method": "qbnorm", "beta": float(self.beta), "k": int(self.k),
                "text_bank": None if self.texts is None else self.texts.record(),
                "item_bank": None if self.items is None else self.items.record()}


def check_renorm(renorm: Any, *, rerank_k: int | None = None) -> None:
    """ConfigError for what ``evaluate_benchmarks`` cannot combine with ``renorm``."""
    from vlr_plugins.eval.renorm import DualSoftmax, QueryBankNorm

    if renorm is None:
        return
    if not isinstance(renorm, (DualSoftmax, QueryBankNorm, QueryBanks)):
        raise ConfigError(f"renorm must be a DualSoftmax, a QueryBankNorm or QueryBanks, found {type(renorm).__name__}")
    if rerank_k is not None:
        raise ConfigError("re-normalised scores cannot be re-ranked: re-ranking re-scores the first stage's top k "
                          "by the matching head; choose one of renorm and rerank_k")


def check_bank_dim(renorm: Any, store: Any, where: str) -> None:
    """ConfigError unless an item bank (item-to-text queries) is as wide as ``store`` (an
    :class:`~vlr_plugins.data.EmbeddingStore`; ``where`` names it in the benchmarks file)."""
    from vlr_plugins.eval.renorm import QueryBankNorm

    if isinstance(renorm, QueryBankNorm):
        try:
            renorm.check_dim(store.dim)
        except ValueError as e:
            raise ConfigError(f"{where}: the store {store.path}: {e}") from None
    if not isinstance(renorm, QueryBanks) or renorm.items is None:
        return
    dim = renorm.items.embeddings.shape[1]
    if dim != store.dim:
        raise ConfigError(f"the item bank {renorm.items.path} holds {dim}-d embeddings, but "
                          f"{where}: the store {store.path} holds {store.dim}-d ones: a "
                          "bank must come from the benchmark's image or video tower")


def renorm_sentence(record: Mapping[str, Any] | None) -> str:
    """``"Scores re-normalised with DSL (dual softmax, temperature 100)."`` or ``"... with QB-Norm
    (beta 20, k 1; text-to-item bank: 180,000 texts from FILE)."``; ``""`` for no renorm."""
    if not record:
        return ""
    if record.get("method") == "dsl":
        return f"Scores re-normalised with DSL (dual softmax, temperature {record['temperature']:g})."
    parts = [f"beta {record['beta']:g}, k {record['k']}"]
    for key, direction, what in (("text_bank", "text-to-item", "texts"), ("item_bank", "item-to-text", "items")):
        bank = record.get(key)
        if isinstance(bank, Mapping):
            parts.append(f"{direction} bank: {bank[what]:,} {what} from {bank['path']}")
        elif bank is not None:  # the engine's record: a count
            parts.append(f"{direction} bank: {bank:,} {what}")
    return f"Scores re-normalised with QB-Norm ({'; '.join(parts)})."
