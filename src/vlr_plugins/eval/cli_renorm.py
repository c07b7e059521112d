"""``vlr eval --renorm dsl|qbnorm``: the options, checked (and the banks read) before the model loads.

* ``--renorm dsl`` ranks by dual softmax (CAMoE / DRL / TS2-Net inference), ``--dsl-temperature``
  (default the library's 100);
* ``--renorm qbnorm`` by QB-Norm with a query bank per direction: ``--query-bank-texts FILE``
  (text-to-item: training captions, encoded by ``--model`` like the benchmark's texts) and/or
  ``--query-bank-items STORE`` (item-to-text: an embedding store of training items),
  ``--qb-beta`` (20) and ``--qb-k`` (1), the official code's defaults.

What a bank may be: :mod:`vlr_plugins.eval.query_bank`; the methods: :mod:`vlr_plugins.eval.renorm`.
"""

from __future__ import annotations

import argparse
from typing import Any

from vlr_plugins.errors import UserError, UsageError

__all__ = ["add_renorm_options", "renorm_from_args"]

_DSL_OPTIONS = ("dsl_temperature",)
_QB_OPTIONS = ("query_bank_texts", "query_bank_fields", "query_bank_items", "qb_beta", "qb_k")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def add_renorm_options(s: Any) -> None:
    """Add ``--renorm`` and its settings to the ``vlr eval`` parser ``s``."""
    s.add_argument("--renorm", choices=("dsl", "qbnorm"),
                   help="rank by re-normalised scores: dsl (dual softmax, CAMoE/DRL/TS2-Net inference) or qbnorm "
                        "(QB-Norm with a query bank: --query-bank-texts and/or --query-bank-items; docs/eval.md)")
    s.add_argument("--dsl-temperature", type=float, metavar="T",
                   help="--renorm dsl: the softmax's temperature on the cosine scores (default 100)")
    s.add_argument("--query-bank-texts", metavar="FILE",
                   help="--renorm qbnorm, text-to-item: the bank's texts (training captions), encoded by --model: "
                        ".txt (a text a line), .jsonl of texts, a retrieval split, paragraph or MVC samples")
    s.add_argument("--query-bank-fields", metavar="FIELDS",
                   help="--query-bank-texts of paragraph or MVC samples: the texts that form the bank, comma-"
                        "separated (paragraph samples: caption (default), paragraph, positives; MVC samples: "
                        "caption fields, default O,S1,S2)")
    s.add_argument("--query-bank-items", metavar="STORE",
                   help="--renorm qbnorm, item-to-text: an embedding store of training items (vlr precompute)")
    s.add_argument("--qb-beta", type=float, metavar="BETA", help="--renorm qbnorm: the inverted softmax's beta (20)")
    s.add_argument("--qb-k", type=int, metavar="K",
                   help="--renorm qbnorm: a gallery entry is normalised when in some bank query's top K (1)")


def _stray(args: argparse.Namespace, dests: tuple[str, ...], needs: str) -> None:
    for dest in dests:
        if getattr(args, dest, None) is not None:
            raise UsageError(_flag(dest), f"is a setting of --renorm {needs}" +
                             (f", and this run has --renorm {args.renorm}" if args.renorm else
                              f": give --renorm {needs} too"))


def _checked(option: str, make: Any) -> Any:
    """``make()``, its ValueError (the library's check of a setting) a UsageError of ``option``."""
    try:
        return make()
    except ValueError as e:
        raise UsageError(option, str(e)) from None


def _item_dims(bank: Any, specs: Any) -> None:
    """The item bank as wide as every benchmark store that opens (the others the engine reports)."""
    from vlr_plugins.data.embedding_store import EmbeddingStore

    dim = int(bank.embeddings.shape[1])
    for spec in specs:
        try:
            store = EmbeddingStore(spec.item_embeddings)
        except UserError:
            continue
        if store.dim != dim:
            raise UsageError("--query-bank-items", f"the store {bank.path} holds {dim}-d embeddings, but the items "
                                                   f"of benchmark {spec.name!r} ({store.path}) are {store.dim}-d: the "
                                                   "bank must come from the same image or video tower")


def renorm_from_args(args: argparse.Namespace, specs: Any = ()) -> Any:
    """``None``, a :class:`~vlr_plugins.eval.DualSoftmax` or
    :class:`~vlr_plugins.eval.query_bank.QueryBanks` (its banks read; the text bank still to be
    encoded): every setting checked, each problem one :class:`~vlr_plugins.errors.UsageError`."""
    import torch

    from vlr_plugins.eval.query_bank import QueryBanks, read_item_bank, read_text_bank
    from vlr_plugins.eval.renorm import DualSoftmax, QueryBankNorm

    if args.renorm != "dsl":
        _stray(args, _DSL_OPTIONS, "dsl")
    if args.renorm != "qbnorm":
        _stray(args, _QB_OPTIONS, "qbnorm")
    if args.renorm is None:
        return None
    if getattr(args, "rerank_k", None) is not None:
        raise UsageError("--rerank-k", f"re-ranks the raw scores' top K by a matching head, and --renorm "
                                       f"{args.renorm} re-normalises every score: choose one")
    if args.renorm == "dsl":
        temperature = 100.0 if args.dsl_temperature is None else args.dsl_temperature
        return _checked("--dsl-temperature", lambda: DualSoftmax(temperature))
    beta = 20.0 if args.qb_beta is None else args.qb_beta
    k = 1 if args.qb_k is None else args.qb_k
    probe = torch.zeros(1, 1)  # the library's checks of beta and k, before any bank is read
    _checked("--qb-beta", lambda: QueryBankNorm(text_bank=probe, beta=beta))
    _checked("--qb-k", lambda: QueryBankNorm(text_bank=probe, beta=beta, k=k))
    if args.query_bank_texts is None and args.query_bank_items is None:
        raise UsageError("--renorm", "qbnorm needs a query bank: --query-bank-texts FILE (text-to-item: training "
                                     "captions) and/or --query-bank-items STORE (item-to-text: stored training items)")
    fields = None
    if args.query_bank_fields is not None:
        if args.query_bank_texts is None:
            raise UsageError("--query-bank-fields", "chooses the texts of --query-bank-texts: give that bank too")
        fields = [f.strip() for f in args.query_bank_fields.split(",")]
        if not all(fields):
            raise UsageError("--query-bank-fields", f"expected field names separated by commas, found "
                                                    f"{args.query_bank_fields!r}")
        if len(set(fields)) < len(fields):
            twice = next(f for f in fields if fields.count(f) > 1)
            raise UsageError("--query-bank-fields", f"{twice!r} named twice")
    texts = None if args.query_bank_texts is None else read_text_bank(args.query_bank_texts, fields=fields)
    items = None if args.query_bank_items is None else read_item_bank(args.query_bank_items)
    if items is not None:
        _item_dims(items, specs)
    return QueryBanks(texts=texts, items=items, beta=beta, k=k)
